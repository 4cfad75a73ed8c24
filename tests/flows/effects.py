"""Flows for the effects tests, and the "outside world" their effects write to.

The outside world is a Redis database (``INTERLUDE_TEST_REDIS``) that counts every call and
every application of an effect and keeps its receipt. It accepts fencing tokens like a careful
external system would: a write carrying an older epoch than one already seen for the same key
is refused, so a slow stale worker cannot apply an effect behind a newer owner's back.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict

from models.errors import FencedError
from worker import NOT_APPLIED, UNKNOWN, Flow, StepContext, input_schema

# KEYS: fence, receipt, applied counter. ARGV: epoch, receipt JSON. Returns the new count or -1.
_APPLY = """
local seen = tonumber(redis.call('GET', KEYS[1]) or '0')
if tonumber(ARGV[1]) < seen then return -1 end
redis.call('SET', KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], ARGV[2])
return redis.call('INCR', KEYS[3])
"""


class StaleWriterError(Exception):
    """The outside world refused a write carrying an older fencing token."""


def outside() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])


def calls(run_id: str) -> int:
    return int(outside().get(f"calls:{run_id}") or 0)


def applied(run_id: str) -> int:
    return int(outside().get(f"applied:{run_id}") or 0)


def receipt_of(key: str) -> Any:
    raw = outside().get(f"receipt:{key}")
    return None if raw is None else json.loads(raw)


def apply(run_id: str, amount: int, *, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    """The outside write: count the call, then apply it unless the fencing token is stale."""
    epoch = fencing_token
    r = outside()
    r.incr(f"calls:{run_id}")
    receipt = {"charged": amount, "key": idempotency_key, "epoch": epoch}
    count = r.eval(
        _APPLY,
        3,
        f"fence:{idempotency_key}",
        f"receipt:{idempotency_key}",
        f"applied:{run_id}",
        epoch,
        json.dumps(receipt),
    )
    if int(count) < 0:
        raise StaleWriterError(f"fencing token {epoch} is stale for {idempotency_key}")
    return receipt


def check_outside(key: str) -> Any:
    """A reconciler that can always tell: the receipt if it happened, else NOT_APPLIED."""
    found = receipt_of(key)
    return NOT_APPLIED if found is None else found


def crash_once(run_id: str, point: str) -> None:
    """SIGKILL this process the first time the run reaches ``point`` (never again)."""
    if outside().set(f"crashed:{run_id}:{point}", 1, nx=True):
        os.kill(os.getpid(), signal.SIGKILL)


def first_time(run_id: str, what: str) -> bool:
    return bool(outside().set(f"first:{run_id}:{what}", 1, nx=True))


def wait_for_signal(name: str, timeout: float = 60.0) -> None:
    r = outside()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and not r.exists(name):
        time.sleep(0.05)


# --- the ledger itself: applied once, failed, reconciled ---------------------------------

ledger = Flow("effect_ledger", version=1)


def _verdict(ctx: StepContext) -> Any:
    """The reconcile verdict the test asked for (for intents the test left behind)."""
    wanted = ctx.input.get("verdict")
    if wanted == "receipt":
        return lambda key: {"reconciled": key}
    if wanted == "not_applied":
        return lambda key: NOT_APPLIED
    if wanted == "unknown":
        return lambda key: UNKNOWN
    return None


def _charge_fn(ctx: StepContext) -> Any:
    if not ctx.input.get("crash_in_fn"):
        return apply

    def crash_then_apply(
        run_id: str, amount: int, *, idempotency_key: str, fencing_token: int
    ) -> Any:
        crash_once(run_id, "in_fn")
        return apply(run_id, amount, idempotency_key=idempotency_key, fencing_token=fencing_token)

    return crash_then_apply


@ledger.step(retries=1, backoff=0.1)
def charge(ctx: StepContext) -> str:
    receipt = ctx.effect(
        "charge",
        _charge_fn(ctx),
        ctx.run_id,
        int(ctx.input.get("amount", 1)),
        reconcile=_verdict(ctx),
    )
    ctx.state["receipt"] = receipt
    if ctx.input.get("fail_after_effect") and first_time(ctx.run_id, "fail_after_effect"):
        raise RuntimeError("step failed after its effect")
    return "done"


@ledger.step()
def done(ctx: StepContext) -> None:
    ctx.state["done"] = True
    return None


def _refuse(run_id: str, *, idempotency_key: str) -> None:
    outside().incr(f"calls:{run_id}")
    raise ValueError("card declined")


refusing = Flow("effect_refused", version=1)


@refusing.step(retries=0)
def decline(ctx: StepContext) -> None:
    ctx.effect("charge", _refuse, ctx.run_id, pass_fencing_token=False)
    return None


@input_schema("effects-approval.v1")
class Go(BaseModel):
    model_config = ConfigDict(extra="forbid")

    go: bool = True


before_wait = Flow("effect_then_interrupt", version=1)


@before_wait.step()
def charge_then_ask(ctx: StepContext) -> None:
    # The effect before the interrupt runs again when the step re-executes on resume.
    ctx.state["receipt"] = ctx.effect("charge", apply, ctx.run_id, 5)
    answer = ctx.interrupt(
        "confirm",
        kind="approval",
        input=Go,
        authority=["approver"],
        evidence={"charged": 5},
        expires_in=3600,
    )
    ctx.state["decision"] = answer.decision.value
    return None


# --- a writer whose lease was taken over ---------------------------------------------------

late = Flow("late_writer", version=1)


@late.step(lease_seconds=2, retries=0)
def slow_charge(ctx: StepContext) -> None:
    """The first execution stalls (inside the effect, or after it) until the test says go."""
    mode = ctx.input["stall"]
    first = first_time(ctx.run_id, "late")
    release = f"release:{ctx.run_id}"

    def stall() -> None:
        # The test freezes this process here (SIGSTOP, as a long GC pause or a frozen VM
        # would), so that it stops renewing its lease, and later lets it carry on.
        outside().set(f"stalled:{ctx.run_id}", os.getpid())
        wait_for_signal(release)

    def charge_slowly(*, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
        receipt = apply(ctx.run_id, 1, idempotency_key=idempotency_key, fencing_token=fencing_token)
        if first and mode == "effect":
            stall()
            return {"late": True}
        return receipt

    try:
        ctx.state["receipt"] = ctx.effect("charge", charge_slowly, reconcile=check_outside)
    except FencedError as exc:
        outside().set(f"fenced:{ctx.run_id}", str(exc))
        raise
    ctx.state["epoch"] = ctx.epoch
    if first and mode == "commit":
        stall()
        outside().set(f"returned:{ctx.run_id}", ctx.epoch)
    return None


# --- killed at every point of an effect ------------------------------------------------------

crashing = Flow("effect_crash", version=1)


@crashing.reconciler("pay")
def _pay_happened(key: str) -> Any:
    return check_outside(key)


def _pay(run_id: str, *, crash: str, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    if crash == "before_write":
        crash_once(run_id, crash)
    receipt = apply(run_id, 1, idempotency_key=idempotency_key, fencing_token=fencing_token)
    if crash == "after_write":
        crash_once(run_id, crash)
    return receipt


@crashing.step(retries=0)
def pay(ctx: StepContext) -> str:
    crash = ctx.input.get("crash", "")
    # "pay" has a registered reconciler that can tell; "pay_blind" has none, so unknown
    # outcomes become repair interrupts.
    name = "pay_blind" if ctx.input.get("blind") else "pay"
    ctx.state["receipt"] = ctx.effect(name, _pay, ctx.run_id, crash=crash)
    if crash == "after_applied":
        crash_once(ctx.run_id, crash)
    return "confirm"


@crashing.step(retries=0)
def confirm(ctx: StepContext) -> None:
    ctx.state["confirmed"] = True
    return None


# --- many runs through outages ------------------------------------------------------------------

steady = Flow("effect_steady", version=1)


@steady.step()
def one(ctx: StepContext) -> str:
    time.sleep(float(ctx.input.get("sleep", 0)))
    ctx.state["trail"] = ["one"]
    return "two"


@steady.step()
def two(ctx: StepContext) -> str:
    time.sleep(float(ctx.input.get("sleep", 0)))
    # An outage can come between the call and its record (PostgreSQL restarted while the
    # worker writes "applied"): the outside world then tells whether the charge landed, and
    # the run goes on instead of waiting for an operator's repair.
    ctx.state["receipt"] = ctx.effect("charge", apply, ctx.run_id, 1, reconcile=check_outside)
    ctx.state["trail"].append("two")
    return "three"


@steady.step()
def three(ctx: StepContext) -> None:
    time.sleep(float(ctx.input.get("sleep", 0)))
    ctx.state["trail"].append("three")
    return None


# --- a worker frozen inside an effect's function (a zombie) ---------------------------------

zombie = Flow("zombie_effect", version=1)


def ship_calls(run_id: str) -> list[int]:
    """The fencing token of every call of ``_ship`` for the run, in the order they began."""
    return [int(token) for token in outside().lrange(f"ship_calls:{run_id}", 0, -1)]


def landed(run_id: str) -> int:
    """How many calls reached the idempotent target (absorbed ones included)."""
    return int(outside().get(f"landed:{run_id}") or 0)


def _ship(run_id: str, *, idempotency_key: str, fencing_token: int) -> Any:
    """An idempotent target: the first write per key wins and later ones return its receipt.

    The first call of a run stops before it writes, so that the test can freeze its process.
    """
    outside().rpush(f"ship_calls:{run_id}", fencing_token)
    if first_time(run_id, "ship"):
        outside().set(f"stalled:{run_id}", os.getpid())
        wait_for_signal(f"release:{run_id}", timeout=300)
    return _write_once(run_id, idempotency_key, fencing_token)


def _ship_now(run_id: str, *, idempotency_key: str, fencing_token: int) -> Any:
    outside().rpush(f"ship_calls:{run_id}", fencing_token)
    return _write_once(run_id, idempotency_key, fencing_token)


def _write_once(run_id: str, key: str, token: int) -> Any:
    r = outside()
    r.incr(f"landed:{run_id}")
    if r.set(f"receipt:{key}", json.dumps({"shipped": key, "epoch": token}), nx=True):
        r.incr(f"applied:{run_id}")
    return receipt_of(key)


@zombie.reconciler("ship")
def _was_shipped(key: str) -> Any:
    return check_outside(key)


@zombie.step(lease_seconds=2, retries=0)
def ship(ctx: StepContext) -> None:
    # "ship" has a reconciler; "ship_blind" has none, so its unknown outcome is a repair.
    name = "ship_blind" if ctx.input.get("blind") else "ship"
    if ctx.input.get("hold"):
        # The test holds the database here, so that the intent's lease renewal is late.
        if first_time(ctx.run_id, "hold"):
            outside().set(f"holding:{ctx.run_id}", os.getpid())
            wait_for_signal(f"go:{ctx.run_id}")
        ctx.state["receipt"] = ctx.effect(name, _ship_now, ctx.run_id)
        return None
    ctx.state["receipt"] = ctx.effect(name, _ship, ctx.run_id)
    return None
