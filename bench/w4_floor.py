"""W4's broker floor: what Celery alone reaches on W4's tasks, nothing durable.

    .venv/bin/python -m bench.w4_floor [--runs 400] [--concurrency 50] [--cpu] [--trace] [--json]

interlude runs a W4 run (two steps of 200 ms each) as one task: the second step continues in
the task of the first. This bench publishes ``--runs`` tasks that each sleep 400 ms (and mark
their start and end in Redis) before it starts one worker configured as interlude's is (JSON,
late acks, prefetch 1, task events as ``INTERLUDE_TASK_EVENTS`` says, off by default,
``-P threads -c 50``, ``-l info``); the clock starts
when the first task starts and stops when the last ends, as in ``bench.w4``. Efficiency is the
same ratio: steps/s ÷ (concurrency / 0.2 s). What interlude loses on top of this is its own.
"""

from __future__ import annotations

import time
from typing import Any

import redis

# (w4_trace records in the floor's worker, which imports this module, when asked to)
from bench import cpu, w4_trace
from bench.processes import (
    BROKER_URL,
    counter,
    exclusive,
    floor_app,
    floor_env,
    start_worker,
    stop_worker,
)
from bench.w4 import STEPS_PER_RUN, measured, w4_main

QUEUE = "floor4"
STEP_SECONDS = 0.2
POLL_SECONDS = 0.02
TIMEOUT_SECONDS = 300
STARTED = "floor4:started"
DONE = "floor4:done"

app = floor_app("floor4", QUEUE)
_marks = counter()


@app.task(name="floor4.run")  # type: ignore[untyped-decorator]
def two_steps(n: int) -> None:
    _marks.set(STARTED, repr(time.time()), nx=True)
    time.sleep(STEP_SECONDS * STEPS_PER_RUN)
    _marks.incr(DONE)


def run(
    runs: int, concurrency: int, *, measure_cpu: bool = False, trace: bool = False
) -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    trace_file = w4_trace.new_file() if trace else None
    _marks.delete(STARTED, DONE)
    for i in range(runs):
        two_steps.delay(i)
    env = w4_trace.worker_env(floor_env(), trace_file, flows=False)
    worker = start_worker("bench.w4_floor", env, QUEUE, ["-P", "threads", "-c", str(concurrency)])
    try:
        with cpu.spent([worker.pid], enabled=measure_cpu) as spent:
            deadline = time.monotonic() + TIMEOUT_SECONDS
            while int(_marks.get(DONE) or 0) < runs:
                if time.monotonic() > deadline:
                    raise RuntimeError("W4 floor: the tasks did not all run in time")
                time.sleep(POLL_SECONDS)
        end = time.time()
    finally:
        stop_worker(worker)
    seconds = end - float(_marks.get(STARTED) or end)
    return measured(runs, concurrency, seconds, STEP_SECONDS, spent, trace_file)


if __name__ == "__main__":
    with exclusive("bench.w4_floor"):
        w4_main(__doc__ or "", run, "W4 floor (Celery alone)")
