"""Flows for ask groups: several interrupts asked by one step, released by all, any or k."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tests.flows.agents import Go
from tests.flows.interrupts import scratch_redis
from worker import Flow, StepContext, input_schema

signoff = Flow("signoff", version=1)

TEAMS = ("finance", "legal", "security")


@signoff.step()
def collect(ctx: StepContext) -> None:
    teams = ctx.input.get("teams", ["finance", "legal"])
    policies = ctx.input.get("on_expiry", {})
    asks: dict[str, dict[str, Any]] = {
        team: {
            "kind": "approval",
            "input": Go,
            "authority": [team],
            # Read at every execution: a test changes it to see the binding at the act.
            "evidence": {"amount": int(scratch_redis().get(f"amount:{ctx.run_id}") or 100)},
            "expires_in": 3600 * (1 + TEAMS.index(team)),
            "on_expiry": policies.get(team, "expire"),
            **({"default": {"note": "by default"}} if policies.get(team) == "default" else {}),
        }
        for team in teams
    }
    need = ctx.input.get("need", "all")
    answers = ctx.ask_all(asks, need=need, group="signoff")
    ctx.state["answered"] = sorted(answers)
    ctx.state["approved"] = sorted(name for name, a in answers.items() if a.approved)


@input_schema("payment_received.v1")
class PaymentReceived(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reference: str = Field(min_length=1)
    amount: int = Field(ge=1)


@input_schema("payment_cancelled.v1")
class PaymentCancelled(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: str = ""


payment = Flow("payment", version=1)
payment.event("payment_received", input=PaymentReceived, authority=["payments"])
payment.event("payment_cancelled", input=PaymentCancelled, authority=["payments"])


@payment.step()
def invoice(ctx: StepContext) -> str:
    ctx.state["invoiced"] = True
    return "settle"


@payment.step()
def settle(ctx: StepContext) -> None:
    if ctx.input.get("either"):
        # Whichever of the two comes first, within a day.
        answers = ctx.ask_all(
            {
                "payment_received": ctx.event_ask("payment_received", expires_in=86400),
                "payment_cancelled": ctx.event_ask("payment_cancelled", expires_in=86400),
            },
            need="any",
            group="payment-outcome",
        )
        ctx.state["outcome"] = sorted(answers)
        return
    paid = ctx.wait_for_event("payment_received", expires_in=86400)
    assert isinstance(paid.input, PaymentReceived)
    ctx.state["paid"] = paid.input.amount
    ctx.state["sender"] = paid.actor
