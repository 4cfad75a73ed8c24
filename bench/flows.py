"""The flows the benchmarks run (``INTERLUDE_FLOWS=bench.flows``).

- ``bench_three_steps``: three trivial steps (``bench.throughput``, the three-step column).
- ``bench_w1``: W1, the approval path: one approval interrupt, then one effect.
- ``bench_w4``: W4, two steps that each wait 200 ms, as a step waiting on a model or an API does.
"""

from __future__ import annotations

import os
import time
from functools import cache
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict

from worker import Flow, StepContext, input_schema

W4_SLEEP_SECONDS = 0.2
APPROVER_ROLE = "bench-approver"

flow = Flow("bench_three_steps", version=1)


@flow.step()
def first(ctx: StepContext) -> str:
    ctx.state["trail"] = ["first"]
    return "second"


@flow.step()
def second(ctx: StepContext) -> str:
    ctx.state["trail"].append("second")
    return "third"


@flow.step()
def third(ctx: StepContext) -> None:
    ctx.state["trail"].append("third")
    return None


@input_schema("bench-approval.v1")
class BenchApproval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


w1 = Flow("bench_w1", version=1)


@w1.step()
def ask(ctx: StepContext) -> str | None:
    answer = ctx.interrupt(
        "bench_approval",
        kind="approval",
        input=BenchApproval,
        authority=[APPROVER_ROLE],
        scope={"n": ctx.input["n"]},
        evidence={"amount": ctx.input["n"]},
        expires_in=3600,
        reason="W1: one approval per run",
    )
    if not answer.approved:
        return None
    return "apply"


def record(n: int, *, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    """The W1 effect: what a call to another system would return, without the call."""
    return {"n": n, "key": idempotency_key, "epoch": fencing_token}


@w1.step()
def apply(ctx: StepContext) -> None:
    ctx.state["receipt"] = ctx.effect("bench_record", record, ctx.input["n"])
    return None


w4 = Flow("bench_w4", version=1)
W4_STARTED = "bench:w4:started"


@cache
def _marks() -> redis.Redis:
    return redis.Redis.from_url(os.environ.get("BENCH_COUNTER_URL", "redis://127.0.0.1:6379/13"))


@w4.step()
def call_model(ctx: StepContext) -> str:
    # The first step to start marks the start of W4's clock (once: NX).
    _marks().set(W4_STARTED, repr(time.time()), nx=True)
    time.sleep(W4_SLEEP_SECONDS)
    return "call_api"


@w4.step()
def call_api(ctx: StepContext) -> None:
    time.sleep(W4_SLEEP_SECONDS)
    return None
