"""W1's eight flushed commits with nothing in them: the database's share of the floor.

    .venv/bin/python -m bench.w1_commit_floor --runs 2000

A W1 run commits eight write transactions (``bench.w1 --count``): the enqueue, the two claims,
the suspend, the resume, the effect's intent, and two commits. Whatever a durable system writes
in them, each is at least a round trip to PostgreSQL and a flush of its WAL before it returns
(``synchronous_commit`` stays on). Here one process sends exactly that per run and nothing
else: one ``INSERT`` of a small row, then seven ``UPDATE`` of it, each its own transaction
(autocommit, prepared), on one connection, in a scratch database. The machine's CPU per run
(``bench.machine_cpu``: every process, PostgreSQL included) is what eight durable transitions
cost before any schema, any Python around them, or any hop to a worker: added to
``bench.w1_floor`` (Celery's hop, nothing durable), the floor of a W1 run that runs its steps as
Celery tasks and commits each transition.
"""

from __future__ import annotations

import argparse
import json
import time
import uuid

import psycopg

from bench import pg
from bench.machine_cpu import busy_seconds
from bench.processes import exclusive

UPDATES = 7  # with the INSERT, W1's eight write transactions


def run(runs: int) -> dict[str, float]:
    with (
        pg.scratch_database("w1_commit_floor") as name,
        psycopg.connect(pg.dsn(name), autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE runs (id text PRIMARY KEY, n integer, state jsonb)")
        ids = [uuid.uuid4().hex for _ in range(runs)]
        insert = "INSERT INTO runs (id, n, state) VALUES (%s, 0, %s::jsonb)"
        update = "UPDATE runs SET n = n + 1, state = %s::jsonb WHERE id = %s"
        machine, own, start = busy_seconds(), time.process_time(), time.perf_counter()
        for run_id in ids:
            conn.execute(insert, (run_id, '{"step": 0}'), prepare=True)
            for step in range(1, UPDATES + 1):
                conn.execute(update, (f'{{"step": {step}}}', run_id), prepare=True)
        seconds = time.perf_counter() - start
        machine, own = busy_seconds() - machine, time.process_time() - own
    return {
        "runs": runs,
        "seconds": seconds,
        "rate": runs / seconds,
        "cpu_ms_per_run": 1000 * machine / runs,
        "client_cpu_ms_per_run": 1000 * own / runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    result = run(args.runs)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"W1's eight commits alone: {result['runs']} runs in {result['seconds']:.2f} s = "
        f"{result['rate']:.1f} runs/s\n"
        f"  the machine's CPU per run: {result['cpu_ms_per_run']:.2f} ms "
        f"(this process {result['client_cpu_ms_per_run']:.2f} ms)"
    )


if __name__ == "__main__":
    with exclusive("bench.w1_commit_floor"):
        main()
