"""Generation 2 of the deployment tests: version 2 only, each declaring how v1 runs continue.

``ver_carry`` v2 asks the same interrupt with the same schema (answers carry over) and
revalidates it on the migrated state; ``ver_reworded`` v2 asks another interrupt instead
(a renewed review). ``ver_orphan`` is gone.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from tests.flows.versions_schemas import VerApproval
from worker import Flow, StepContext, input_schema
from worker.flows.flow import RevalidationContext


@input_schema("ver-signoff.v1")
class SignOff(BaseModel):
    model_config = ConfigDict(extra="forbid")

    signer: str


carry_v2 = Flow("ver_carry", version=2)


@carry_v2.migrates_from(1)
def _carry_from_v1(state: dict[str, Any]) -> dict[str, Any]:
    return {"amount_cents": round(state["amount"] * 100), "migrated": True}


def _evidence(state: dict[str, Any], run_input: Any) -> dict[str, Any]:
    # A run started with "repriced" finds another amount when version 2 looks again.
    cents = state["amount_cents"] + (100 if run_input.get("repriced") else 0)
    return {"amount": cents / 100}


@carry_v2.revalidate("approval")
def _recheck(ctx: RevalidationContext) -> Any:
    return _evidence(ctx.state, ctx.input)


@carry_v2.step()
def prepare(ctx: StepContext) -> str:
    ctx.state["amount_cents"] = round(float(ctx.input.get("amount", 10)) * 100)
    return "approve"


@carry_v2.step()
def approve(ctx: StepContext) -> str:
    answer = ctx.interrupt(
        "approval",
        kind="approval",
        input=VerApproval,
        authority=["approver"],
        evidence=_evidence(ctx.state, ctx.input),
        expires_in=3600,
    )
    ctx.state["comment"] = answer.input.comment if answer.input else None
    ctx.state["approved_by"] = answer.actor
    return "done"


@carry_v2.step()
def done(ctx: StepContext) -> None:
    ctx.state["finished_on"] = 2
    return None


reworded_v2 = Flow("ver_reworded", version=2)


@reworded_v2.migrates_from(1)
def _reworded_from_v1(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "migrated": True}


@reworded_v2.step()
def review(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "sign_off", kind="approval", input=SignOff, authority=["approver"], expires_in=3600
    )
    ctx.state["finished_on"] = 2
    ctx.state["signer"] = answer.input.signer if answer.input else None
    return None
