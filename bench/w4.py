"""W4, steps that wait on I/O: steps/s of one threads-pool worker, and its efficiency.

    .venv/bin/python -m bench.w4 [--runs 400] [--concurrency 50] [--cpu] [--trace] [--json]

One ``celery -A worker worker -P threads -c 50``; ``--runs`` runs of ``bench_w4`` (two steps,
each sleeping 200 ms, as a step waiting on a model or an API does) are enqueued before the
worker starts, so that the caller's speed does not enter the measure. The clock starts when the
first step starts (marked from inside the step) and stops when the bench sees the last run
succeeded. Efficiency = steps/s ÷ (concurrency / 0.2 s): 1.0 means every slot always busy.

``--cpu`` adds the CPU each process spent per run from the worker's start to the last run's
end (``bench.cpu``): here the worker's one process runs every step, so its CPU per run is what
its fifty threads contend for, under one GIL. ``--trace`` adds where the slots went idle,
recorded inside the worker (``bench.w4_trace``).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis

from bench import cpu, pg, w4_trace
from bench.processes import (
    BROKER_URL,
    COUNTER_URL,
    INTERLUDE_QUEUES,
    bench_env,
    exclusive,
    start_worker,
    stop_worker,
)
from bench.w1 import Poller

STEPS_PER_RUN = 2


def run(
    runs: int, concurrency: int, *, measure_cpu: bool = False, trace: bool = False
) -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    trace_file = w4_trace.new_file() if trace else None
    with pg.scratch_database("interlude_w4") as name:
        url = pg.sqlalchemy_url(name)
        env = bench_env(url, BENCH_COUNTER_URL=COUNTER_URL)
        os.environ.update(env)
        # Imported only now: importing the flows imports interlude, whose Celery app reads
        # its settings once, and they must name this run's database and broker.
        from bench.flows import W4_SLEEP_SECONDS, W4_STARTED
        from models.db import dispose_engines
        from models.migrate import upgrade
        from models.settings import reset_settings

        reset_settings()
        dispose_engines()
        upgrade(url)
        marks = redis.Redis.from_url(COUNTER_URL)
        marks.delete(W4_STARTED)
        from worker import enqueue_run

        for i in range(runs):
            enqueue_run("bench_w4", {"n": i})
        dispose_engines()
        poller = Poller(pg.dsn(name))
        worker = start_worker(
            "worker",
            w4_trace.worker_env(env, trace_file, flows=True),
            INTERLUDE_QUEUES,
            ["-P", "threads", "-c", str(concurrency)],
        )
        try:
            with cpu.spent([worker.pid], enabled=measure_cpu) as spent:
                poller.wait_for("succeeded", runs)
            end = time.time()
        finally:
            stop_worker(worker)
            poller.close()
        started = marks.get(W4_STARTED)
        assert started is not None, "no W4 step started"
        seconds = end - float(started)
    return measured(runs, concurrency, seconds, W4_SLEEP_SECONDS, spent, trace_file)


def measured(
    runs: int,
    concurrency: int,
    seconds: float,
    step_seconds: float,
    spent: dict[str, float] | None = None,
    trace_file: Path | None = None,
) -> dict[str, Any]:
    """W4's figures: ``runs`` runs of two ``step_seconds`` steps took ``seconds`` on
    ``concurrency`` slots; the ideal keeps every slot busy all the time. ``spent``: the CPU
    by process (``bench.cpu``), when measured; ``trace_file``: the worker's trace
    (``bench.w4_trace``), when recorded."""
    rate = runs * STEPS_PER_RUN / seconds
    ideal = concurrency / step_seconds
    result: dict[str, Any] = {
        "runs": runs,
        "concurrency": concurrency,
        "seconds": seconds,
        "steps_per_s": rate,
        "ideal": ideal,
        "efficiency": rate / ideal,
    }
    if spent:
        result["cpu"] = spent
    if trace_file is not None:
        result["trace"] = w4_trace.summary(trace_file, concurrency)
    return result


def report(result: dict[str, Any], label: str = "W4") -> str:
    line = (
        f"{label}: {result['runs']} two-step runs, -P threads -c {result['concurrency']}: "
        f"{result['steps_per_s']:.1f} steps/s of the ideal {result['ideal']:.0f} "
        f"(efficiency {result['efficiency']:.2f}) in {result['seconds']:.2f} s"
    )
    if "cpu" in result:
        line += "\n  " + cpu.describe(result["cpu"], result["runs"], result["seconds"])
    if "trace" in result:
        line += "\n" + w4_trace.describe(result["trace"], result["concurrency"])
    return line


def w4_main(description: str, run: Callable[..., dict[str, Any]], label: str) -> None:
    """The command of a W4 variant: ``--runs N --concurrency C [--cpu] [--trace] [--json]``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument("--cpu", action="store_true", help="also the CPU each process spent")
    parser.add_argument(
        "--trace", action="store_true", help="also where the slots went idle (bench.w4_trace)"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.runs, args.concurrency, measure_cpu=args.cpu, trace=args.trace)
    print(json.dumps(result) if args.json else report(result, label))


if __name__ == "__main__":
    with exclusive("bench.w4"):
        w4_main(__doc__ or "", run, "W4")
