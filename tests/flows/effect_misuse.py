"""Flows that misuse ``ctx.effect``: a key used again with other arguments or by another
effect, a receipt the ledger cannot keep, a name or key it cannot store.

Their effects write to the outside world of ``tests.flows.effects`` (a Redis database), which
counts every call and keeps the JSON receipt it made, so that a reconciler can find it.
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from pydantic import BaseModel, ConfigDict

from tests.flows.effects import outside, receipt_of
from worker import NOT_APPLIED, Flow, StepContext, input_schema


def _record(
    run_id: str, *args: Any, idempotency_key: str, fencing_token: int, **kwargs: Any
) -> Any:
    """The outside write: counts the call, keeps (and returns) a JSON receipt of it."""
    r = outside()
    r.incr(f"calls:{run_id}")
    receipt: dict[str, Any] = {"args": list(args), "key": idempotency_key}
    if kwargs:
        receipt["kwargs"] = kwargs
    r.set(f"receipt:{idempotency_key}", json.dumps(receipt))
    return receipt


@input_schema("effect-misuse-go.v1")
class Go(BaseModel):
    model_config = ConfigDict(extra="forbid")

    go: bool = True


def _ask(ctx: StepContext, name: str) -> None:
    ctx.interrupt(name, kind="approval", input=Go, authority=["approver"], expires_in=3600)


# --- the same call again, after a trip through the database; then another call ---------------

again = Flow("effect_called_again", version=1)


@again.step()
def prepare(ctx: StepContext) -> str:
    # Values that come back from PostgreSQL's JSONB otherwise than they went in: 1e20 as the
    # integer 10**20, -0.0 as 0.0, keys in another order. The next step runs in the same task
    # with them as they were written; when it runs again after a wait, as read back.
    ctx.state["amount"] = 1e20
    ctx.state["order"] = {"zeta": -0.0, "alpha": [1, 2.5, {"b": 5.0, "a": "x"}]}
    return "charge"


@again.step(retries=2, backoff=0.1)
def charge(ctx: StepContext) -> None:
    amount, order = ctx.state["amount"], ctx.state["order"]
    outside().rpush(f"seen:{ctx.run_id}", type(amount).__name__)
    # What the test changes between the waits (the price of the outside world, say).
    raw = outside().get(f"note:{ctx.run_id}")
    note = raw.decode() if isinstance(raw, bytes) else "first"
    ctx.state["receipt"] = ctx.effect("charge", _record, ctx.run_id, amount, order, note=note)
    _ask(ctx, "first")
    _ask(ctx, "second")
    return None


# --- one caller-chosen key in two steps ---------------------------------------------------

shared = Flow("effect_key_shared", version=1)


@shared.step(retries=2, backoff=0.1)
def first_use(ctx: StepContext) -> str:
    key = f"order-{ctx.run_id}"
    ctx.state["first"] = ctx.effect("reserve", _record, ctx.run_id, 10, key=key)
    return "second_use"


@shared.step(retries=2, backoff=0.1)
def second_use(ctx: StepContext) -> None:
    # "same": the same effect and arguments (the recorded receipt is this call's);
    # "other_args": the same effect with another amount; "other_effect": another effect
    # with the same arguments.
    mode = ctx.input["mode"]
    name = "reserve" if mode in ("same", "other_args") else "charge"
    amount = 20 if mode == "other_args" else 10
    key = f"order-{ctx.run_id}"
    ctx.state["second"] = ctx.effect(name, _record, ctx.run_id, amount, key=key)
    return None


# --- a receipt the ledger cannot keep ----------------------------------------------------------

lost = Flow("effect_lost_receipt", version=1)

BAD_RECEIPTS: dict[str, Any] = {
    "datetime": datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC),
    "set": {"a", "b"},
    "nul": {"order": "PO\x00-1"},
    "nul_key": {"PO\x00": 1},
    "surrogate": ["PO-\ud800"],
}


def _bad_receipt(
    run_id: str, mode: str, *, idempotency_key: str, fencing_token: int, note: str
) -> Any:
    """Happens (the outside world keeps its JSON receipt), then returns one that is not."""
    _record(run_id, mode, idempotency_key=idempotency_key, fencing_token=fencing_token)
    return BAD_RECEIPTS[mode]


def _look_up(key: str) -> Any:
    found = receipt_of(key)
    return NOT_APPLIED if found is None else found


@lost.step(retries=2, backoff=0.1)
def order(ctx: StepContext) -> None:
    reconcile = _look_up if ctx.input.get("reconciler") else None
    # What the test may change before the run is retried.
    raw = outside().get(f"note:{ctx.run_id}")
    note = raw.decode() if isinstance(raw, bytes) else "first"
    receipt = ctx.effect(
        "order", _bad_receipt, ctx.run_id, ctx.input["mode"], note=note, reconcile=reconcile
    )
    ctx.state["receipt"] = receipt
    return None


# --- names and keys the ledger cannot store -------------------------------------------------------

bad_ids = Flow("effect_bad_ids", version=1)

BAD_IDS: dict[str, tuple[Any, Any]] = {
    "name_int": (5, None),
    "name_empty": ("", None),
    "name_nul": ("pa\x00y", None),
    "name_surrogate": ("pay\ud800", None),
    "name_long": ("n" * 201, None),
    "key_int": ("pay", 123),
    "key_empty": ("pay", ""),
    "key_nul": ("pay", "k\x00"),
    "key_surrogate": ("pay", "k\udfff"),
    "key_long": ("pay", "k" * 401),
}


@bad_ids.step(retries=2, backoff=0.1)
def pay(ctx: StepContext) -> None:
    name, key = BAD_IDS[ctx.input["case"]]
    ctx.state["receipt"] = ctx.effect(name, _record, ctx.run_id, key=key)
    return None


# --- a call that fails with text no database stores -----------------------------------------

refused = Flow("effect_refused_oddly", version=1)


def _decline(run_id: str, *, idempotency_key: str, fencing_token: int) -> None:
    outside().incr(f"calls:{run_id}")
    raise ValueError("card\x00declined \ud800")


@refused.step(retries=0)
def decline(ctx: StepContext) -> None:
    ctx.effect("charge", _decline, ctx.run_id)
    return None
