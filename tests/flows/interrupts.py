"""Flows for the interrupt and gateway tests."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from worker import Flow, StepContext, input_schema


@input_schema("approval.v1")
class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: str = ""
    amount_limit: int | None = None


approval = Flow("approval", version=1)


@approval.step()
def prepare(ctx: StepContext) -> str:
    ctx.state["prepared"] = True
    return "gate"


@approval.step()
def gate(ctx: StepContext) -> str:
    answer = ctx.interrupt(
        "approve",
        kind="approval",
        input=Approval,
        authority=["approver"],
        scope={"action": "deploy", "env": ctx.input.get("env", "staging")},
        evidence={"diff": ctx.input.get("diff", "v1")},
        expires_in=float(ctx.input.get("expires_in", 3600)),
        reason="deploy needs approval",
    )
    ctx.state["decision"] = answer.decision.value
    ctx.state["approved_by"] = answer.actor
    ctx.state["comment"] = answer.input.comment if isinstance(answer.input, Approval) else None
    return "finish"


@approval.step()
def finish(ctx: StepContext) -> None:
    ctx.state["finished"] = True
    return None
