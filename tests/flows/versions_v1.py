"""Generation 1 of the deployment tests: flows as first deployed (load alone, without v2).

``ver_carry`` and ``ver_reworded`` get a version 2 in ``versions_v2``; ``ver_orphan`` does not
(a flow the next deployment drops without a migration).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tests.flows.versions_schemas import VerApproval
from worker import Flow, StepContext, input_schema


@input_schema("ver-orphan.v1")
class OrphanAck(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


carry_v1 = Flow("ver_carry", version=1)


@carry_v1.step()
def prepare(ctx: StepContext) -> str:
    ctx.state["amount"] = float(ctx.input.get("amount", 10))
    return "approve"


@carry_v1.step()
def approve(ctx: StepContext) -> str:
    ctx.interrupt(
        "approval",
        kind="approval",
        input=VerApproval,
        authority=["approver"],
        evidence={"amount": ctx.state["amount"]},
        expires_in=3600,
    )
    return "done"


@carry_v1.step()
def done(ctx: StepContext) -> None:
    ctx.state["finished_on"] = 1
    return None


reworded_v1 = Flow("ver_reworded", version=1)


@reworded_v1.step()
def review(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "approval", kind="approval", input=VerApproval, authority=["approver"], expires_in=3600
    )
    ctx.state["finished_on"] = 1
    ctx.state["comment"] = answer.input.comment if answer.input else None
    return None


orphan = Flow("ver_orphan", version=1)


@orphan.step()
def ack(ctx: StepContext) -> None:
    ctx.interrupt("ack", kind="approval", input=OrphanAck, authority=["approver"], expires_in=3600)
    return None
