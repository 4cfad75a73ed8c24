"""Flows for the interrupt and gateway tests.

Steps count their executions in the test Redis database (``INTERLUDE_TEST_REDIS``) so that a
test can tell how often a step ran, from any process.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.contracts import InterruptView
from models.errors import InterruptNotFoundError
from worker import Flow, StepContext, get_interrupt, input_schema
from worker.flows.flow import RevalidationContext


def scratch_redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])


def count(key: str) -> int:
    return int(scratch_redis().incr(key))


@input_schema("approval.v1")
class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    comment: str = ""
    amount_limit: int | None = None


@input_schema("receipt.v2")
class Receipt(BaseModel):
    model_config = ConfigDict(extra="forbid")

    invoice: str = Field(min_length=1)
    total: float


@input_schema("shipment.v1")
class Shipment(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tracking: str


# "viewer" reads its runs and interrupts over HTTP, and may answer nothing.
approval = Flow("approval", version=1, viewer_roles=("viewer",))


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


# Two interrupts in one step (answered in order) and a third in a later step.
multi = Flow("multi_gate", version=1)


@multi.step()
def review(ctx: StepContext) -> str:
    count(f"multi:review:{ctx.run_id}")
    legal = ctx.interrupt(
        "legal",
        kind="approval",
        input=Approval,
        authority=["legal"],
        scope={"contract": ctx.input.get("contract", "c-1")},
        evidence={"clauses": [1, 2, 3]},
        expires_in=3600,
        reason="legal review",
    )
    ctx.state["legal"] = [legal.decision.value, legal.actor, _dump(legal.input)]
    receipt = ctx.interrupt(
        "finance",
        kind="evidence",
        input=Receipt,
        authority=["finance"],
        scope={"contract": ctx.input.get("contract", "c-1"), "team": "ap"},
        evidence={"po": "PO-7", "lines": {"b": 2, "a": 1}},
        expires_in=7200,
        on_expiry="cancel",
        reason="attach the invoice",
    )
    ctx.state["finance"] = [receipt.decision.value, receipt.actor, _dump(receipt.input)]
    return "ship"


@multi.step()
def ship(ctx: StepContext) -> None:
    event = ctx.interrupt(
        "shipped",
        kind="event",
        input=Shipment,
        authority=["ops"],
        expires_in=600,
        reason="wait for the carrier",
    )
    ctx.state["shipped"] = event.approved
    ctx.state["tracking"] = event.input.tracking if isinstance(event.input, Shipment) else None
    return None


def _dump(value: BaseModel | None) -> Any:
    return value.model_dump(mode="json") if value is not None else None


# Separation of duties: whoever started the run may not release it.
guarded = Flow("guarded", version=1)


@guarded.step()
def sign_off(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "sign_off",
        kind="approval",
        input=Approval,
        authority=["approver"],
        expires_in=3600,
        separate_from_starter=True,
    )
    ctx.state["signed_by"] = answer.actor
    return None


# Evidence recomputed from current records (a price kept in the test Redis) at resume time.
priced = Flow("priced", version=1)


# A stored price of this value stands for a price service that is down: asking raises.
PRICE_UNAVAILABLE = "unavailable"


def current_price(sku: str) -> str:
    value = scratch_redis().get(f"price:{sku}")
    if value is not None and value.decode() == PRICE_UNAVAILABLE:
        raise ConnectionError("the price service is unavailable")
    return value.decode() if value is not None else "unpriced"


@priced.step()
def quote(ctx: StepContext) -> None:
    sku = ctx.input["sku"]
    answer = ctx.interrupt(
        "approve",
        kind="approval",
        input=Approval,
        authority=["approver"],
        scope={"sku": sku},
        evidence={"sku": sku, "price": current_price(sku)},
        expires_in=3600,
        reason="price approval",
    )
    ctx.state["price"] = current_price(sku)
    ctx.state["comment"] = answer.input.comment if isinstance(answer.input, Approval) else None
    return None


@priced.revalidate("approve")
def recompute_price(context: RevalidationContext) -> Any:
    sku = context.input["sku"]
    return {"sku": sku, "price": current_price(sku)}


@priced.notifier
def record_notification(interrupt: InterruptView) -> None:
    # Look the interrupt up through a new transaction: this only finds it once it committed.
    try:
        visible = get_interrupt(interrupt.id).status
    except InterruptNotFoundError:
        visible = None
    note = {
        "id": interrupt.id,
        "name": interrupt.name,
        "visible": visible,
        "pid": os.getpid(),
        "previous_input": interrupt.previous_input,
    }
    scratch_redis().rpush(f"notified:{interrupt.run_id}", json.dumps(note))


# A per-run allowance: spending past it waits for a budget grant.
metered = Flow("metered", version=1, budget=10)


@metered.step()
def spend(ctx: StepContext) -> str:
    count(f"metered:spend:{ctx.run_id}")
    for units in ctx.input.get("costs", [4, 4, 4]):
        ctx.consume(units)
    ctx.state["consumed"] = ctx.budget_consumed
    return "after_spend"


@metered.step()
def after_spend(ctx: StepContext) -> None:
    count(f"metered:after:{ctx.run_id}")
    return None


# The first step holds until the test says go, so an operator can ask for a pause meanwhile.
pausable = Flow("pausable", version=1)
HOLD_SECONDS = 30.0


@pausable.step()
def hold(ctx: StepContext) -> str:
    r = scratch_redis()
    r.set(f"pausable:holding:{ctx.run_id}", 1)
    deadline = time.monotonic() + HOLD_SECONDS
    while not r.get(f"pausable:go:{ctx.run_id}") and time.monotonic() < deadline:
        time.sleep(0.02)
    return "after_hold"


@pausable.step()
def after_hold(ctx: StepContext) -> None:
    count(f"pausable:after:{ctx.run_id}")
    return None


# The race test: the step after the interrupt counts its executions.
raced = Flow("raced", version=1)


@raced.step()
def contested(ctx: StepContext) -> str:
    answer = ctx.interrupt(
        "approve",
        kind="approval",
        input=Approval,
        authority=["approver"],
        evidence={"n": 1},
        expires_in=3600,
    )
    ctx.state["approved_by"] = answer.actor
    return "after_approval"


@raced.step()
def after_approval(ctx: StepContext) -> None:
    count(f"raced:after:{ctx.run_id}")
    return None


# A schema whose own code fails (not a validation error): the gateway's last resort.
@input_schema("fragile.v1")
class Fragile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""

    @field_validator("note")
    @classmethod
    def _explode(cls, value: str) -> str:
        if value == "boom":
            raise RuntimeError("the schema's own code failed")
        return value


class Measured(BaseModel):
    model_config = ConfigDict(extra="forbid")

    amount: float = 0.0


fragile = Flow("fragile", version=1, input_model=Measured)


@fragile.step()
def ask(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "ask",
        kind="approval",
        input=Fragile,
        authority=["approver"],
        evidence={"amount": ctx.input.get("amount", 0.0)},
        expires_in=3600,
    )
    ctx.state["note"] = answer.input.note if isinstance(answer.input, Fragile) else None
    return None


# A step that catches its own wait's signal: the mistake interlude must not let through.
swallowing = Flow("swallowing", version=1)


def _pay(*, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    count(f"swallowing:paid:{idempotency_key}")
    return {"paid": True}


@swallowing.step()
def pay_after_approval(ctx: StepContext) -> None:
    then = ctx.input.get("then")
    try:
        ctx.interrupt(
            "go",
            kind="approval",
            input=Approval,
            authority=["approver"],
            expires_in=3600,
            reason="pay?",
        )
    except:  # noqa: E722 (the mistake under test)
        if then == "return":
            return None
    finally:
        if then == "finally":
            return None  # noqa: B012 (the mistake under test)
    ctx.effect("pay", _pay)
    ctx.state["paid"] = True
    return None


@priced.notifier
def failing_notifier(interrupt: InterruptView) -> None:
    # Fails only for the runs a test marks: one line in the log, the commit untouched.
    if scratch_redis().get(f"notifier-fails:{interrupt.run_id}"):
        raise RuntimeError("webhook said 500\nsecond line")
