"""W1's broker floor: what Celery alone costs for the two tasks of each W1 run, nothing durable.

    .venv/bin/python -m bench.w1_floor --runs 200 [--cpu] [--json]

A W1 run is two Celery tasks in interlude: its first step (published by ``enqueue_run``), which
stops on the approval, and the resume (published by ``submit_resume``), which runs the final
step. This bench does the same two hops with tasks that do nothing but count (a Redis INCR),
on a worker configured as interlude's is (JSON, late acks, prefetch 1, task events as
``INTERLUDE_TASK_EVENTS`` says, off by default, ``-c 1`` prefork, ``-l info``) against the same
Redis: the caller publishes N first tasks, waits until all ran, publishes N second tasks, waits
until all ran. No database at all.

``--cpu`` adds the CPU each process spent per run: the caller, the worker's parent and child,
Redis (as ``bench.w1 --cpu`` does for interlude).

Whatever interlude does per run comes on top of this, so W1 can be no faster than this rate;
the rivals, in one process each, have no such hop.
"""

from __future__ import annotations

from typing import Any

import redis

from bench.processes import (
    BROKER_URL,
    counter,
    exclusive,
    floor_app,
    floor_env,
    publish,
    two_hops,
    wait_for_count,
)
from bench.w1 import rate_main

QUEUE = "floor"

app = floor_app("floor", QUEUE)
_counter = counter()


@app.task(name="floor.step")  # type: ignore[untyped-decorator]
def step(n: int, phase: str) -> None:
    _counter.incr(f"floor:{phase}")


def _wait_for(phase: str, runs: int) -> None:
    wait_for_count(_counter, f"floor:{phase}", runs, f"W1 floor: the {phase} tasks")


def run(runs: int, *, measure_cpu: bool = False, pool: str = "prefork") -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    _counter.delete("floor:first", "floor:second")
    return two_hops(
        "bench.w1_floor",
        floor_env(),
        QUEUE,
        pool,
        runs,
        first=lambda i: publish(step, i, "first"),
        second=lambda i: publish(step, i, "second"),
        wait=_wait_for,
        measure_cpu=measure_cpu,
    )


if __name__ == "__main__":
    with exclusive("bench.w1_floor"):
        rate_main(__doc__ or "", run, "W1 floor", cpu_option=True, pool_option=True)
