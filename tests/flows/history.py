"""A three-step flow with an effect in its middle step: for step history and forks."""

from __future__ import annotations

from typing import Any

from tests.flows.interrupts import scratch_redis
from worker import Flow, StepContext

# Its runs are started by a shipping service (over HTTP) as well as by its operators.
shipping = Flow("shipping", version=1, starter_roles=("shipper",))


def shipments(run_id: str) -> int:
    """How many times the outside world was asked to ship for ``run_id``'s order."""
    return int(scratch_redis().get(f"shipped:{run_id}") or 0)


def ship(order: str, *, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    count = scratch_redis().incr(f"shipped:{order}")
    return {"shipment": f"S-{order}-{count}"}


@shipping.step()
def pack(ctx: StepContext) -> str:
    ctx.state["packed"] = ctx.input.get("items", 1)
    return "send"


@shipping.step()
def send(ctx: StepContext) -> str:
    ctx.state["receipt"] = ctx.effect("ship", ship, ctx.input["order"])
    return "close"


@shipping.step()
def close(ctx: StepContext) -> None:
    ctx.state["closed"] = True
