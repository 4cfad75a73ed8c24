"""Flows for the run engine's tests."""

from __future__ import annotations

import os
import signal
import time
from typing import Any

import redis

from worker import Flow, StepContext

three = Flow("three_steps", version=1)


@three.step()
def first(ctx: StepContext) -> str:
    ctx.state["trail"] = ["first"]
    ctx.state["n"] = ctx.input.get("n", 0)
    return "second"


@three.step()
def second(ctx: StepContext) -> str:
    ctx.state["trail"].append("second")
    ctx.state["n"] += 1
    return "third"


@three.step()
def third(ctx: StepContext) -> None:
    ctx.state["trail"].append("third")
    ctx.state["n"] += 1
    return None


quick = Flow("quick", version=1)


@quick.step()
def only(ctx: StepContext) -> None:
    ctx.state["done"] = True
    return None


# Operated by its own team: the default ``operator`` role may not cancel, pause or retry it.
owned = Flow("owned", version=1, operator_roles=("release-ops",))


@owned.step("only")
def owned_only(ctx: StepContext) -> None:
    ctx.state["done"] = True
    return None


flaky = Flow("flaky", version=1)


@flaky.step(retries=2, backoff=0.1)
def sometimes(ctx: StepContext) -> None:
    r = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])
    tries = r.incr(f"flaky:{ctx.run_id}")
    if tries < int(ctx.input.get("fail_times", 1)) + 1:
        raise RuntimeError(f"flaky failure {tries}")
    ctx.state["tries"] = tries
    return None


slow = Flow("slow", version=1)


@slow.step(lease_seconds=2)
def begin(ctx: StepContext) -> str:
    ctx.state["began"] = True
    return "crawl"


@slow.step(lease_seconds=2)
def crawl(ctx: StepContext) -> None:
    r = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])
    # Only the first execution is slow: a re-execution after a crash finishes at once. Decided
    # before "started" is announced: a test kills the process as soon as it sees that mark, and
    # a kill landing between the two would leave the re-execution to sleep in its place.
    first = r.set(f"slow:slept:{ctx.run_id}", 1, nx=True)
    r.set(f"slow:started:{ctx.run_id}", os.getpid())
    if ctx.input.get("die"):
        os.kill(os.getpid(), signal.SIGKILL)
    if first:
        time.sleep(float(ctx.input.get("sleep", 0)))
    ctx.state["crawled"] = True
    return None


# Only version 2 of "evolving" is deployed; runs started on version 1 migrate onto it.
evolving = Flow("evolving", version=2)


@evolving.migrates_from(1)
def _from_v1(state: dict[str, object]) -> dict[str, object]:
    return {**state, "unit": "cents", "total": int(float(str(state.get("total", 0))) * 100)}


@evolving.step()
def tally(ctx: StepContext) -> str:
    ctx.state["tallied_by"] = "v2"
    return "close"


@evolving.step()
def close(ctx: StepContext) -> None:
    ctx.state["closed"] = True
    return None


# Steps that make the mistakes a flow author can: what each leaves must still be storable.
mistaken = Flow("mistaken", version=1)


@mistaken.step(retries=0)
def err(ctx: StepContext) -> Any:
    mistake = ctx.input["mistake"]
    if mistake == "nul_state":
        ctx.state["note"] = "a\x00b"
    elif mistake == "surrogate_key":
        ctx.state["\ud800"] = 1
    elif mistake == "nul_error":
        raise ValueError("bad byte \x00 and \ud800 here")
    elif mistake == "list_step":
        return ["done"]
    return None
