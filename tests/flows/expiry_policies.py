"""Flows for the expiry policy tests: a ``default`` whose evidence the outside world changes."""

from __future__ import annotations

import os

import redis
from pydantic import BaseModel, ConfigDict

from models.contracts import InterruptView
from worker import Flow, StepContext, input_schema
from worker.flows.flow import RevalidationContext

NOTIFIED = "expiry_policies:notified"


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"], decode_responses=True)


def price_key(run_id: str) -> str:
    """Where a test sets the price a run's evidence is computed from (100 when unset)."""
    return f"expiry_policies:price:{run_id}"


def broken_key(run_id: str) -> str:
    """Set: the run's revalidation raises (the price source is down)."""
    return f"expiry_policies:broken:{run_id}"


@input_schema("expiry_policies_choice.v1")
class Choice(BaseModel):
    model_config = ConfigDict(extra="forbid")

    choice: str


def _evidence(run_id: str) -> dict[str, int]:
    return {"price": int(_redis().get(price_key(run_id)) or 100)}


defaulting = Flow("defaulting", version=1)


@defaulting.notifier
def remember(interrupt: InterruptView) -> None:
    _redis().rpush(NOTIFIED, f"{interrupt.run_id}:{interrupt.id}")


@defaulting.step()
def decide(ctx: StepContext) -> str:
    """Wait for a choice; nobody answering by the deadline means the declared default."""
    answer = ctx.interrupt(
        "choose",
        kind="approval",
        input=Choice,
        authority=["approver"],
        scope={"ticket": "T-1"},
        evidence=_evidence(ctx.run_id),
        expires_in=float(ctx.input.get("expires_in", 60)),
        on_expiry="default",
        default=Choice(choice="fallback"),
        reason="pick an option",
    )
    ctx.state["choice"] = answer.input.choice if isinstance(answer.input, Choice) else None
    ctx.state["answered_by"] = answer.actor
    return "record"


@defaulting.step()
def record(ctx: StepContext) -> None:
    ctx.state["recorded"] = True
    return None


@defaulting.revalidate("choose")
def current_price(context: RevalidationContext) -> dict[str, int]:
    if _redis().exists(broken_key(context.run_id)):
        raise RuntimeError("price source unavailable")
    return _evidence(context.run_id)
