"""What one publish of a step costs its caller: interlude's publisher against Celery's default.

    .venv/bin/python -m bench.publish [--publishes 3000] [--rounds 5] [--json]

A W1 run publishes twice, both in the caller (the enqueue and the accepted resume). Here this
process sends the same step task (one run id, its flow in interlude's header, its flow and step
as ``kwargsrepr``) to a queue of the bench's Redis database, the ways below taking turns for
``--rounds`` rounds of ``--publishes`` each:

- **Celery's default**: ``send_task`` as called without interlude's options, so Celery declares
  the queue before each publish and makes ``argsrepr`` with its ``saferepr``;
- **interlude**: ``worker.engine.dispatch.celery_publisher``, which on Redis sends no
  declaration and gives ``argsrepr``.

- **a bare push**: ``LPUSH`` of the same message from redis-py, what is left without Celery
  and kombu.

Printed: this process's CPU per publish for each, the median of the rounds.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis

from bench.processes import BROKER_URL, exclusive

QUEUE = "bench.publish"
FLOW, STEP = "bench_w1", "ask"


def run(publishes: int, rounds: int) -> dict[str, Any]:
    os.environ["INTERLUDE_BROKER_URL"] = BROKER_URL  # (read when the app is first imported)
    from worker.app import app
    from worker.engine import dispatch
    from worker.engine.tasknames import FLOW_HEADER, TASK_STEP

    def celery_default(run_id: str) -> None:
        app.send_task(
            TASK_STEP,
            args=[run_id],
            queue=QUEUE,
            kwargsrepr=repr({"flow": FLOW, "step": STEP}),
            headers={FLOW_HEADER: FLOW},
        )

    def interlude(run_id: str) -> None:
        dispatch.celery_publisher(
            TASK_STEP, run_id, queue=QUEUE, countdown=None, flow=FLOW, step=STEP
        )

    broker = redis.Redis.from_url(BROKER_URL)
    interlude("warm-up")
    message = broker.rpop(QUEUE)
    assert isinstance(message, bytes), f"nothing published to {QUEUE}"

    def bare_push(_: str) -> None:
        broker.lpush(QUEUE, message)

    ways: dict[str, Callable[[str], None]] = {
        "celery_default": celery_default,
        "interlude": interlude,
        "bare_lpush": bare_push,
    }
    us: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for _ in range(rounds):
            for name, publish in ways.items():
                publish("warm-up")
                start = time.process_time()
                for i in range(publishes):
                    publish(f"run-{i:08d}")
                us[name].append(1e6 * (time.process_time() - start) / publishes)
                broker.delete(QUEUE)
    finally:
        broker.delete(QUEUE, f"_kombu.binding.{QUEUE}")
    return {
        "publishes": publishes,
        "rounds": rounds,
        "cpu_us_per_publish": {name: statistics.median(v) for name, v in us.items()},
        "rounds_us": {name: [round(x, 1) for x in v] for name, v in us.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--publishes", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run(args.publishes, args.rounds)
    if args.json:
        print(json.dumps(result))
        return
    medians = result["cpu_us_per_publish"]
    print(f"CPU per publish, median of {args.rounds} rounds of {args.publishes}:")
    for name, value in medians.items():
        print(f"  {name:15} {value:6.0f} µs   (rounds: {result['rounds_us'][name]})")
    print(f"  interlude ÷ Celery's default: {medians['interlude'] / medians['celery_default']:.2f}")


if __name__ == "__main__":
    with exclusive("bench.publish"):
        main()
