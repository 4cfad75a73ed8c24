"""Runs per second of a three-step flow: interlude (durable) against a bare Celery chain.

Both run on one prefork worker (``-c N``, one child for ``-c 1``) against the same
Redis, in one go, so the machine's noise hits both alike; read the ratio, not the absolute
numbers. interlude commits every step durably, so on a disk where a PostgreSQL commit costs
a few milliseconds it is commit-bound; concurrency lets PostgreSQL group those commits.

    .venv/bin/python -m bench.throughput --runs 300 --concurrency 4 --database postgresql
"""

from __future__ import annotations

import argparse
import os
import subprocess
import tempfile
import time
import uuid

import redis
from sqlalchemy import create_engine, text

from bench.processes import BROKER_URL, counter, exclusive, floor_env, start_worker, stop_worker

PG_ADMIN = "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"


def _worker(
    app: str, env: dict[str, str], queues: str, concurrency: int
) -> subprocess.Popen[bytes]:
    # Prefork even for one: ``-c 1`` is how a user runs one worker process.
    return start_worker(app, env, queues, ["-c", str(concurrency)])


def bench_bare(runs: int, concurrency: int) -> float:
    done = counter()
    done.delete("bare:done")
    proc = _worker("bench.bare_chain", floor_env(), "bare", concurrency)
    try:
        os.environ["BENCH_BROKER_URL"] = BROKER_URL
        from celery import chain

        from bench.bare_chain import first, second, third

        start = time.perf_counter()
        for i in range(runs):
            chain(first.s({"n": i}), second.s(), third.s()).apply_async()
        while int(done.get("bare:done") or 0) < runs:
            time.sleep(0.01)
        return runs / (time.perf_counter() - start)
    finally:
        stop_worker(proc)


def bench_interlude(runs: int, database: str, concurrency: int) -> float:
    name = f"interlude_bench_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    if database == "postgresql":
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        url = PG_ADMIN.rsplit("/", 1)[0] + f"/{name}"
    else:
        url = f"sqlite:///{tempfile.mkdtemp()}/bench.db"
    env = {
        **os.environ,
        "INTERLUDE_DATABASE_URL": url,
        "INTERLUDE_BROKER_URL": BROKER_URL,
        "INTERLUDE_FLOWS": "bench.flows",
    }
    os.environ.update(
        {k: env[k] for k in ("INTERLUDE_DATABASE_URL", "INTERLUDE_BROKER_URL", "INTERLUDE_FLOWS")}
    )
    from models.db import dispose_engines
    from models.migrate import upgrade
    from models.settings import reset_settings

    # Each measurement has its own database: forget the previous one's settings and pool.
    reset_settings()
    dispose_engines()
    upgrade(url)
    proc = _worker("worker", env, "interlude.steps,interlude.resumes", concurrency)
    try:
        from sqlalchemy import func, select

        from bench.w1 import ready_caller
        from models.db import transaction
        from models.tables import Run
        from worker import enqueue_run

        ready_caller()
        start = time.perf_counter()
        for i in range(runs):
            enqueue_run("bench_three_steps", {"n": i})
        while True:
            with transaction(readonly=True) as session:
                done = session.execute(
                    select(func.count()).select_from(Run).where(Run.state == "succeeded")
                ).scalar_one()
            if done >= runs:
                break
            time.sleep(0.02)
        return runs / (time.perf_counter() - start)
    finally:
        stop_worker(proc)
        from models.db import dispose_engines

        dispose_engines()
        if database == "postgresql":
            with admin.connect() as conn:
                conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--database", choices=["postgresql", "sqlite"], default="postgresql")
    args = parser.parse_args()
    redis.Redis.from_url(BROKER_URL).flushdb()
    bare = bench_bare(args.runs, args.concurrency)
    durable = bench_interlude(args.runs, args.database, args.concurrency)
    print(f"one worker, concurrency {args.concurrency}, {args.runs} three-step runs")
    print(f"bare Celery chain (no durability): {bare:7.1f} runs/s")
    print(f"interlude on {args.database:10s}:       {durable:7.1f} runs/s")
    print(f"ratio interlude / bare chain:      {durable / bare:7.2f}")


if __name__ == "__main__":
    with exclusive("bench.throughput"):
        main()
