"""From an answer to its step moving: the resume's latency at a steady rate of answers.

    .venv/bin/python -m bench.resume_latency [--runs 400] [--rate 40] [--pool prefork] [--json]

PostgreSQL and Redis local and one worker lane (``bench.w1``'s worker). N ``bench_w1`` runs
are started and left waiting on their approval; then this process answers them through
``submit_resume``, one every 1/rate seconds (a steady stream, as people answering would be, not
a burst), and waits until all finished. For each answer: from just before ``submit_resume`` to
its return (the gateway's work: the resume is recorded and accepted, the resume task published),
and to the moment the worker's claim of the resumed run returned and its next step started
(the final checkpoint's ``started_at``, the worker's own clock: the same machine's). Median,
95th and 99th percentiles and the worst, in ms.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from datetime import UTC
from typing import Any

import psycopg
import redis

from bench import pg
from bench.processes import BROKER_URL, bench_env, exclusive, stop_worker
from bench.w1 import POOLS, Poller, contract, prepare, ready_caller, start_workers


def percentiles(values: list[float]) -> dict[str, float]:
    """Median, 95th, 99th percentile and the worst of ``values`` (nearest rank)."""
    ordered = sorted(values)

    def rank(p: float) -> float:
        return ordered[min(len(ordered) - 1, max(0, round(p * len(ordered)) - 1))]

    return {
        "median": statistics.median(ordered),
        "p95": rank(0.95),
        "p99": rank(0.99),
        "max": ordered[-1],
    }


def _step_started(dsn: str) -> dict[str, float]:
    """Each run's final step's start (epoch seconds): the checkpoint its last step committed."""
    with psycopg.connect(dsn) as conn:
        rows = conn.execute(
            "SELECT run_id, max(started_at) FROM checkpoints"
            " WHERE started_at IS NOT NULL GROUP BY run_id"
        ).fetchall()
    return {
        str(run_id): at.replace(tzinfo=at.tzinfo or UTC).timestamp()
        for run_id, at in rows
        if at is not None
    }


def run(runs: int, rate: float, pool: str = "prefork") -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    with pg.scratch_database("interlude_resume_latency") as name:
        url = pg.sqlalchemy_url(name)
        credential = prepare(url)
        from models.db import dispose_engines
        from worker import enqueue_run, list_interrupts, submit_resume

        ready_caller()
        (worker,) = start_workers("worker", bench_env(url), 1, pool)
        poller = Poller(pg.dsn(name))
        answered: dict[str, tuple[float, float]] = {}  # run: (asked at, answered after, s)
        try:
            for i in range(runs):
                enqueue_run("bench_w1", {"n": i})
            poller.wait_for("waiting", runs)
            pending = list_interrupts(status="pending", kind="approval", limit=runs)
            start = time.monotonic()
            for i, interrupt in enumerate(pending):
                # A steady stream: each answer at its own time, however long the last took.
                time.sleep(max(0.0, start + i / rate - time.monotonic()))
                asked = time.time()
                result = submit_resume(contract(interrupt), credential)
                answered[interrupt.run_id] = (asked, time.time() - asked)
                if not result.accepted:
                    raise RuntimeError(f"resume refused: {result.outcome.value}")
            poller.wait_for("succeeded", runs)
        finally:
            stop_worker(worker)
            poller.close()
            dispose_engines()
        started = _step_started(pg.dsn(name))
    moving = [1000 * (started[run] - asked) for run, (asked, _) in answered.items()]
    return {
        "runs": runs,
        "rate": rate,
        "pool": pool,
        "answered_ms": percentiles([1000 * took for _, took in answered.values()]),
        "step_moving_ms": percentiles(moving),
    }


def report(result: dict[str, Any]) -> str:
    def said(figures: dict[str, float]) -> str:
        return ", ".join(f"{k} {v:.1f}" for k, v in figures.items())

    return (
        f"{result['runs']} answers at {result['rate']:g}/s, one {result['pool']} worker lane:\n"
        f"  answered (submit_resume returned), ms: {said(result['answered_ms'])}\n"
        f"  its step moving (claimed, the step started), ms: {said(result['step_moving_ms'])}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=400)
    parser.add_argument("--rate", type=float, default=40.0, help="answers per second")
    parser.add_argument("--pool", choices=POOLS, default="prefork")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    result = run(args.runs, args.rate, args.pool)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    with exclusive("bench.resume_latency"):
        main()
