"""W1's floor as interlude must run it: Celery's two tasks and the eight flushed commits, each
made by the process that makes it in interlude, and nothing else.

    .venv/bin/python -m bench.w1_durable_floor --runs 500 [--pool solo] [--cpu] [--json]

``bench.w1_floor`` (Celery's hop, nothing durable) and ``bench.w1_commit_floor`` (eight
commits, one process) added together are a floor that no design can reach: it commits every
transition from one process, as if the caller and the worker shared one database connection.
A run that runs its steps as Celery tasks commits where it decides. The caller commits the
run before publishing its first task (a durable enqueue) and the answer before publishing
the resume (an acknowledged answer is never lost); the worker commits each transition of the
steps it runs. ``bench.w1 --count`` splits W1's eight write transactions that way, two in the
caller and six in the worker:

- the caller: an ``INSERT`` of the run, then the first task published;
- the first task: two ``UPDATE`` (the claim, the suspend);
- the caller: one ``UPDATE`` (the answer accepted), then the resume published;
- the resume task: four ``UPDATE`` (the claim, the next step's claim with the checkpoint, the
  effect's intent, the final commit).

Each statement is its own transaction (autocommit, prepared) on one connection per process,
kept open, on a row of three columns in a scratch database; ``synchronous_commit`` stays on.
The worker is ``bench.w1_floor``'s (interlude's settings; a task counts in Redis when it is
done, as there). What the machine spends per run here is what every run of a design like
interlude's pays before it writes a byte of its own schema or runs a line of its own code:
the floor of W1's CPU for steps that are Celery tasks and transitions that are committed.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

import psycopg
import redis

from bench import pg
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

QUEUE = "durable_floor"
# W1's write transactions by where interlude makes them (``bench.w1 --count``).
FIRST_TASK_COMMITS = 2
RESUME_TASK_COMMITS = 4

INSERT = "INSERT INTO runs (id, n, state) VALUES (%s, 0, %s::jsonb)"
UPDATE = "UPDATE runs SET n = n + 1, state = %s::jsonb WHERE id = %s"

app = floor_app("durable_floor", QUEUE)
_counter = counter()
_connection: psycopg.Connection[Any] | None = None


def _db() -> psycopg.Connection[Any]:
    """This process's connection, opened at its first use and kept (as a pool child keeps
    interlude's)."""
    global _connection
    if _connection is None:
        _connection = psycopg.connect(os.environ["BENCH_FLOOR_DSN"], autocommit=True)
    return _connection


def _commit(conn: psycopg.Connection[Any], run_id: str, n: int) -> None:
    conn.execute(UPDATE, (f'{{"n": {n}}}', run_id), prepare=True)


@app.task(name="durable_floor.step")  # type: ignore[untyped-decorator]
def step(run_id: str, phase: str) -> None:
    conn = _db()
    for n in range(FIRST_TASK_COMMITS if phase == "first" else RESUME_TASK_COMMITS):
        _commit(conn, run_id, n)
    _counter.incr(f"durable_floor:{phase}")


def _wait_for(phase: str, runs: int) -> None:
    key, what = f"durable_floor:{phase}", f"W1 durable floor: the {phase} tasks"
    wait_for_count(_counter, key, runs, what)


def run(runs: int, *, measure_cpu: bool = False, pool: str = "prefork") -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    _counter.delete("durable_floor:first", "durable_floor:second")
    ids = [uuid.uuid4().hex for _ in range(runs)]
    with (
        pg.scratch_database("w1_durable_floor") as name,
        psycopg.connect(pg.dsn(name), autocommit=True) as conn,
    ):
        conn.execute("CREATE TABLE runs (id text PRIMARY KEY, n integer, state jsonb)")

        def enqueue(i: int) -> None:
            conn.execute(INSERT, (ids[i], '{"n": 0}'), prepare=True)
            publish(step, ids[i], "first")

        def resume(i: int) -> None:
            _commit(conn, ids[i], FIRST_TASK_COMMITS)
            publish(step, ids[i], "second")

        result = two_hops(
            "bench.w1_durable_floor",
            {**floor_env(), "BENCH_FLOOR_DSN": pg.dsn(name)},
            QUEUE,
            pool,
            runs,
            first=enqueue,
            second=resume,
            wait=_wait_for,
            measure_cpu=measure_cpu,
        )
        written = conn.execute("SELECT sum(n) FROM runs").fetchone()
    # Every update of every run landed: 1 + 2 + 4 per run (the INSERT sets n to 0).
    expected = runs * (FIRST_TASK_COMMITS + 1 + RESUME_TASK_COMMITS)
    if written is None or written[0] != expected:
        raise RuntimeError(f"W1 durable floor: {written} updates written, {expected} expected")
    return result


if __name__ == "__main__":
    with exclusive("bench.w1_durable_floor"):
        rate_main(__doc__ or "", run, "W1 durable floor", cpu_option=True, pool_option=True)
