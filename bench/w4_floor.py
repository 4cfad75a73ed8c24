"""W4's broker floor: what Celery alone reaches on W4's tasks, nothing durable.

    .venv/bin/python -m bench.w4_floor [--runs 400] [--concurrency 50] [--json]

interlude runs a W4 run (two steps of 200 ms each) as one task: the second step continues in
the task of the first. This bench publishes ``--runs`` tasks that each sleep 400 ms (and mark
their start and end in Redis) before it starts one worker configured as interlude's is (JSON,
late acks, prefetch 1, task events on, ``-P threads -c 50``, ``-l info``); the clock starts
when the first task starts and stops when the last ends, as in ``bench.w4``. Efficiency is the
same ratio: steps/s ÷ (concurrency / 0.2 s). What interlude loses on top of this is its own.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from typing import Any

import redis
from celery import Celery

from bench.processes import BROKER_URL, COUNTER_URL, exclusive, start_worker, stop_worker

QUEUE = "floor4"
STEP_SECONDS = 0.2
STEPS_PER_RUN = 2
POLL_SECONDS = 0.02
TIMEOUT_SECONDS = 300
STARTED = "floor4:started"
DONE = "floor4:done"

app = Celery("floor4", broker=os.environ.get("BENCH_BROKER_URL", BROKER_URL))
# As worker/app.py configures interlude's app, but for the queues and the result backend.
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    event_serializer="json",
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    worker_send_task_events=True,
    task_send_sent_event=True,
    task_ignore_result=True,
    task_default_queue=QUEUE,
)
_marks = redis.Redis.from_url(os.environ.get("BENCH_COUNTER_URL", COUNTER_URL))


@app.task(name="floor4.run")  # type: ignore[untyped-decorator]
def two_steps(n: int) -> None:
    _marks.set(STARTED, repr(time.time()), nx=True)
    time.sleep(STEP_SECONDS * STEPS_PER_RUN)
    _marks.incr(DONE)


def run(runs: int, concurrency: int) -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    _marks.delete(STARTED, DONE)
    for i in range(runs):
        two_steps.delay(i)
    env = {**os.environ, "BENCH_BROKER_URL": BROKER_URL, "BENCH_COUNTER_URL": COUNTER_URL}
    worker = start_worker("bench.w4_floor", env, QUEUE, ["-P", "threads", "-c", str(concurrency)])
    try:
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while int(_marks.get(DONE) or 0) < runs:
            if time.monotonic() > deadline:
                raise RuntimeError("W4 floor: the tasks did not all run in time")
            time.sleep(POLL_SECONDS)
        end = time.time()
    finally:
        stop_worker(worker)
    seconds = end - float(_marks.get(STARTED) or end)
    rate = runs * STEPS_PER_RUN / seconds
    ideal = concurrency / STEP_SECONDS
    return {
        "runs": runs,
        "concurrency": concurrency,
        "seconds": seconds,
        "steps_per_s": rate,
        "ideal": ideal,
        "efficiency": rate / ideal,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.runs, args.concurrency)
    if args.json:
        print(json.dumps(result))
    else:
        print(
            f"W4 floor (Celery alone): {result['steps_per_s']:.1f} steps/s of the ideal "
            f"{result['ideal']:.0f} (efficiency {result['efficiency']:.2f}) in "
            f"{result['seconds']:.2f} s"
        )


if __name__ == "__main__":
    with exclusive("bench.w4_floor"):
        main()
