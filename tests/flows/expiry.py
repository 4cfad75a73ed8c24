"""Flows for the expiry and cancellation tests."""

from __future__ import annotations

import os
import time

import redis
from pydantic import BaseModel, ConfigDict

from models.contracts import InterruptView
from worker import Flow, StepContext, input_schema

NOTIFIED = "expiry:notified"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])


@input_schema("expiry_choice.v1")
class Choice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    choice: str


expiring = Flow("expiring", version=1)


@expiring.notifier
def remember(interrupt: InterruptView) -> None:
    # Whoever committed the interrupt (worker or sweeper) says so where the test can see it.
    _redis().rpush(
        NOTIFIED,
        f"{interrupt.run_id}:{interrupt.id}:{interrupt.escalation_level}:{','.join(interrupt.roles)}",
    )


@expiring.step()
def decide(ctx: StepContext) -> str:
    """Wait for a choice; the input says how long and what happens when nobody answers."""
    policy = ctx.input.get("policy", "expire")
    answer = ctx.interrupt(
        "choose",
        kind="approval",
        input=Choice,
        authority=["approver"],
        scope={"ticket": ctx.input.get("ticket", "T-1")},
        evidence={"offer": ctx.input.get("offer", "standard")},
        expires_in=float(ctx.input.get("expires_in", 3600)),
        on_expiry=policy,
        escalate_to=["manager"] if policy == "escalate" else None,
        escalation_expires_in=ctx.input.get("escalation_expires_in"),
        max_escalations=int(ctx.input.get("max_escalations", 1)),
        default=Choice(choice="fallback") if policy == "default" else None,
        reason="pick an option",
    )
    ctx.state["choice"] = answer.input.choice if isinstance(answer.input, Choice) else None
    ctx.state["answered_by"] = answer.actor
    return "record"


@expiring.step()
def record(ctx: StepContext) -> None:
    ctx.state["recorded"] = True
    return None


# A step that holds its lease until the test releases it, then tries to write.
held = Flow("held", version=1)


@held.step()
def hold(ctx: StepContext) -> None:
    r = _redis()
    r.set(f"held:started:{ctx.run_id}", ctx.epoch)
    deadline = time.monotonic() + 20
    while not r.exists(f"held:release:{ctx.run_id}") and time.monotonic() < deadline:
        time.sleep(0.05)
    if ctx.input.get("effect"):
        ctx.effect("charge", _charge, ctx.run_id, pass_fencing_token=False)
    ctx.state["held"] = True
    return None


def _charge(run_id: str, *, idempotency_key: str) -> dict[str, str]:
    _redis().incr(f"held:charged:{run_id}")
    return {"charged": idempotency_key}
