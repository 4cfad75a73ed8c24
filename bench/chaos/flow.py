"""The flow the chaos run drives, and the two outside systems its effects write to.

A run asks for an approval, then calls two effects: ``charge`` (with a reconciler that looks
the key up at the deduplicating target) and ``ship`` (no reconciler: an unknown outcome
becomes a repair for an operator). Each call writes to both targets, in a Redis that no fault
touches (``CHAOS_TARGET_URL``):

* the *deduplicating* target applies a key once (``SET NX``) and returns the first receipt,
  as a payment provider honouring idempotency keys would;
* the *plain* target appends every landing with its fencing token, as a system that
  deduplicates nothing would, so the report can count what a naive target would have seen;
* the *fencing* target refuses a call whose fencing token is lower than one it has seen (a
  call begun by a later owner), as a store honouring fencing tokens would: a frozen owner's
  late call is refused there.

Each call sleeps a little between its start and its writes, so that faults land inside it;
while it runs, the process is listed under ``inflight`` (pid → run, effect, token), so that
the injector can freeze a process inside an effect (``bench.chaos.faults``).
"""

from __future__ import annotations

import json
import os
import random
import time
from functools import cache
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict

from worker import NOT_APPLIED, Flow, StepContext, input_schema

APPROVER_ROLE = "chaos-approver"
OPERATOR_ROLE = "chaos-operator"
EFFECTS = ("charge", "ship")

flow = Flow("chaos", version=1, operator_roles=(OPERATOR_ROLE,))


@cache
def target() -> redis.Redis:
    return redis.Redis.from_url(os.environ["CHAOS_TARGET_URL"])


@input_schema("chaos-approval.v1")
class Approval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


# The fencing target, atomically: a token lower than the highest seen is refused (0); else it
# becomes the highest, and a landing is kept (1). ARGV: token, "begin" or "land".
FENCED = """
local highest = tonumber(redis.call('GET', KEYS[1]) or '-1')
local token = tonumber(ARGV[1])
if token < highest then return 0 end
redis.call('SET', KEYS[1], token)
if ARGV[2] == 'land' then redis.call('RPUSH', KEYS[2], token) end
return 1
"""
INFLIGHT = "inflight"


def fenced(run_id: str, effect: str, token: int, what: str) -> bool:
    """The fencing target sees a call begin or land; False if it refused its token."""
    keys = (f"fenced:highest:{run_id}:{effect}", f"fenced:landed:{run_id}:{effect}")
    return bool(target().eval(FENCED, 2, *keys, token, what))


def call_target(
    run_id: str, effect: str, *, idempotency_key: str, fencing_token: int
) -> dict[str, Any]:
    """One call of an effect: recorded as begun, then written to the three targets."""
    r = target()
    pid = os.getpid()
    r.hset(INFLIGHT, str(pid), f"{run_id} {effect} {fencing_token}")
    try:
        r.rpush(f"calls:{run_id}:{effect}", fencing_token)
        fenced(run_id, effect, fencing_token, "begin")
        time.sleep(random.uniform(0.2, 1.0))
        r.rpush(f"landed:{run_id}:{effect}", fencing_token)
        receipt = {"key": idempotency_key, "effect": effect, "epoch": fencing_token}
        if r.set(f"receipt:{idempotency_key}", json.dumps(receipt), nx=True):
            r.sadd(f"applied:{run_id}:{effect}", idempotency_key)
        if not fenced(run_id, effect, fencing_token, "land"):
            r.rpush(f"fenced:refused:{run_id}:{effect}", fencing_token)
        return lookup(idempotency_key) or receipt
    finally:
        r.hdel(INFLIGHT, str(pid))


def lookup(key: str) -> dict[str, Any] | None:
    """What the deduplicating target holds for ``key`` (its receipt), if anything."""
    raw = target().get(f"receipt:{key}")
    return None if raw is None else dict(json.loads(raw))


@flow.reconciler("charge")
def charge_happened(key: str) -> Any:
    found = lookup(key)
    return NOT_APPLIED if found is None else found


@flow.step()
def prepare(ctx: StepContext) -> str:
    ctx.state["n"] = ctx.input.get("n", 0)
    return "approve"


@flow.step()
def approve(ctx: StepContext) -> str:
    answer = ctx.interrupt(
        "approval",
        kind="approval",
        input=Approval,
        authority=[APPROVER_ROLE],
        evidence={"n": ctx.state["n"]},
        expires_in=3600,
        reason="chaos approval",
    )
    ctx.state["approved_by"] = answer.actor
    return "charge"


@flow.step()
def charge(ctx: StepContext) -> str:
    ctx.state["charge"] = ctx.effect("charge", call_target, ctx.run_id, "charge")
    return "ship"


@flow.step()
def ship(ctx: StepContext) -> None:
    ctx.state["ship"] = ctx.effect("ship", call_target, ctx.run_id, "ship")
    return None
