"""W1's floor with interlude's own statements: Celery's two tasks sending the nine statements a
W1 run sends, each from the process that sends it, and no other code of interlude's.

    .venv/bin/python -m bench.w1_record_floor --runs 500 [--pool solo] [--cpu] [--json]
    .venv/bin/python -m bench.w1_record_floor --runs 1000 --lanes 2   # the whole machine

``bench.w1_durable_floor`` commits W1's transitions as rows of three columns. A run of
interlude writes the record its guarantees stand on: the run moved by compare-and-set with its
lease and fencing epoch, its events, the checkpoint, the interrupt with its evidence, the
answer's attempt, the effect's intent and outcome. This floor writes exactly that, with the
statements interlude sends, and runs none of interlude's Python around them: what the machine
spends per run here, no change of interlude's Python can remove; only a change of what the
server is asked to do (the statements, the schema, the record) can.

How. W1's statements are recorded from real runs of it, and each measured run is given values
of its own in place of the recorded ones (``bench.recorded_w1``); each process builds every
run's values before the clock starts. Then, as in ``bench.w1_durable_floor``, the caller sends
its statements on one kept connection (autocommit, prepared) and publishes the run's two tasks
to a worker of Celery alone with interlude's settings, whose tasks send theirs. With
``--lanes N``, the whole machine as ``bench.w1 --lanes N --pool solo`` runs it: N callers
(processes), each with its share of the runs, and N solo workers, started together
(``bench.lanes``).

Left out besides interlude's Python: the caller's listing of the interrupts to answer (one
statement for all the runs in ``bench.w1``). Every statement must touch as many rows as it did
when recorded, and at the end every measured run must have succeeded with its effect applied:
otherwise the bench fails.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any

import psycopg
import redis

from bench import cpu, lanes, pg
from bench.machine_cpu import report_result, wait_for_go
from bench.processes import (
    BROKER_URL,
    ROOT,
    counter,
    exclusive,
    floor_app,
    floor_env,
    publish,
    start_worker,
    stop_worker,
    two_hops,
    wait_for_count,
)
from bench.recorded_w1 import (
    CALLER_PHASES,
    TASK_PHASES,
    Recorded,
    Template,
    plans,
    record,
    run_scoped,
)
from bench.w1 import CPU_HELP, POOLS

QUEUE = "record_floor"
TEMPLATE_ENV, RUNS_ENV, DSN_ENV = "BENCH_RECORD_TEMPLATE", "BENCH_RECORD_RUNS", "BENCH_FLOOR_DSN"
LANE_RUNS_ENV = "BENCH_RECORD_LANE_RUNS"  # the runs of each caller: a task counts for its lane
CALLER_ENV = "BENCH_RECORD_CALLER"  # a lane's caller builds its own runs' statements only
MISMATCH = "record_floor:mismatch"


def send(cursor: psycopg.RawCursor[Any], statements: list[tuple[Recorded, list[Any]]]) -> None:
    """One phase of one run, as interlude's driver sends it: each statement its own
    transaction, prepared, on a cursor kept for its connection (as ``models.driver`` keeps
    its); the rows read where the driver reads them. A statement that touches other than the
    rows it touched when recorded is counted (``MISMATCH``)."""
    for recorded, values in statements:
        cursor.execute(recorded.sql, values, prepare=True)
        if recorded.returns_rows:
            cursor.fetchall()
        if cursor.rowcount != recorded.rowcount:
            _counter.incr(MISMATCH)


def _connect(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True, options="-c TimeZone=UTC")


app = floor_app("record_floor", QUEUE)
_counter = counter()
_cursor: psycopg.RawCursor[Any] | None = None  # the worker's, on its one connection
_plans: dict[str, list[list[tuple[Recorded, list[Any]]]]] = {}


def _template() -> tuple[Template, frozenset[str], datetime]:
    loaded: tuple[Template, frozenset[str], datetime] = pickle.loads(
        Path(os.environ[TEMPLATE_ENV]).read_bytes()
    )
    return loaded


def _load_worker_plans() -> None:
    """In a worker: every run's statements of its two tasks, built before any task comes (a
    worker of the whole machine takes any lane's)."""
    template, tokens, recorded_at = _template()
    numbers = range(int(os.environ[RUNS_ENV]))
    _plans.update(plans(template, tokens, numbers, TASK_PHASES, recorded_at))


if TEMPLATE_ENV in os.environ and CALLER_ENV not in os.environ:
    _load_worker_plans()


def _done_key(phase: str, run: int) -> str:
    """Where the tasks of ``phase`` count themselves: by the lane whose caller published them."""
    return f"record_floor:{phase}:{run // int(os.environ[LANE_RUNS_ENV])}"


@app.task(name="record_floor.step")  # type: ignore[untyped-decorator]
def step(run: int, phase: str) -> None:
    global _cursor
    if _cursor is None:  # connected at the first task and kept, as a solo worker keeps its
        _cursor = psycopg.RawCursor(_connect(os.environ[DSN_ENV]))
    send(_cursor, _plans[phase][run])
    _counter.incr(_done_key(phase, run))


class Caller:
    """A caller of runs ``numbers``: their statements of the enqueue and the answer, built
    before the clock starts, sent on one kept connection, each phase followed by its task."""

    def __init__(self, numbers: range) -> None:
        template, tokens, recorded_at = _template()
        self.numbers = numbers
        self.plans = plans(template, tokens, numbers, CALLER_PHASES, recorded_at)
        self.conn = _connect(os.environ[DSN_ENV])
        self.cursor = psycopg.RawCursor(self.conn)

    def enqueue(self, i: int) -> None:
        send(self.cursor, self.plans["enqueue"][i])
        publish(step, self.numbers[i], "first")

    def resume(self, i: int) -> None:
        send(self.cursor, self.plans["resume"][i])
        publish(step, self.numbers[i], "second")

    def wait_for(self, phase: str, runs: int) -> None:
        key, what = _done_key(phase, self.numbers[0]), f"W1 record floor: the {phase} tasks"
        wait_for_count(_counter, key, runs, what)

    def all(self) -> float:
        """W1's two hops for all of its runs; the seconds they took."""
        start = time.perf_counter()
        for i in range(len(self.numbers)):
            self.enqueue(i)
        self.wait_for("first", len(self.numbers))
        for i in range(len(self.numbers)):
            self.resume(i)
        self.wait_for("second", len(self.numbers))
        return time.perf_counter() - start

    def close(self) -> None:
        self.conn.close()


@contextmanager
def _recorded(runs: int, lane_runs: int) -> Iterator[dict[str, str]]:
    """A scratch database with W1 recorded on it: the environment of the processes that replay
    it (``runs`` in all, ``lane_runs`` per caller). Checked once they are done."""
    redis.Redis.from_url(BROKER_URL).flushdb()
    for key in _counter.scan_iter("record_floor:*"):  # (an earlier run's counts)
        _counter.delete(key)
    with pg.scratch_database("w1_record_floor") as name:
        url, dsn = pg.sqlalchemy_url(name), pg.dsn(name)
        first, second, recorded_at = record(url)
        tokens = run_scoped(first, second)
        with tempfile.TemporaryDirectory(prefix="bench-record-") as folder:
            path = Path(folder) / "template.pickle"
            path.write_bytes(pickle.dumps((first, tokens, recorded_at)))
            yield {
                **floor_env(),
                DSN_ENV: dsn,
                TEMPLATE_ENV: str(path),
                RUNS_ENV: str(runs),
                LANE_RUNS_ENV: str(lane_runs),
            }
            with _connect(dsn) as conn:
                _check(conn, runs)


def run(runs: int, *, measure_cpu: bool = False, pool: str = "prefork") -> dict[str, Any]:
    """One lane: this process the caller, one worker of ``pool``."""
    with _recorded(runs, runs) as env:
        os.environ.update({k: env[k] for k in (DSN_ENV, TEMPLATE_ENV, LANE_RUNS_ENV)})
        caller = Caller(range(runs))
        try:
            return two_hops(
                "bench.w1_record_floor",
                env,
                QUEUE,
                pool,
                runs,
                first=caller.enqueue,
                second=caller.resume,
                wait=caller.wait_for,
                measure_cpu=measure_cpu,
            )
        finally:
            caller.close()


def run_lanes(runs: int, lanes_: int) -> dict[str, Any]:
    """The whole machine: ``lanes_`` callers (processes) at once, each with its share of the
    runs, and ``lanes_`` solo workers (``bench.lanes``: the machine's CPU per run, and each
    role's, over the timed part)."""
    if runs % lanes_:
        raise ValueError(f"{runs} runs do not share evenly among {lanes_} lanes")
    share = runs // lanes_
    with _recorded(runs, share) as env:
        workers = [
            start_worker("bench.w1_record_floor", env, QUEUE, ["--pool", "solo"])
            for _ in range(lanes_)
        ]
        command = [sys.executable, "-m", "bench.w1_record_floor", "--caller", "--runs", str(share)]
        try:
            result = lanes.run(
                [[*command, "--lane", str(k)] for k in range(lanes_)],
                env={**env, CALLER_ENV: "1"},
                cwd=str(ROOT),
                workers=[worker.pid for worker in workers],
            )
        finally:
            for worker in workers:
                stop_worker(worker)
    return result


def lane_caller(lane: int, share: int) -> None:
    """One caller of ``run_lanes``: ready, then at the start signal its share of W1."""
    caller = Caller(range(lane * share, (lane + 1) * share))
    try:
        wait_for_go()
        seconds = caller.all()
        report_result({"runs": share, "seconds": seconds})
    finally:
        caller.close()


def _check(conn: psycopg.Connection[Any], runs: int) -> None:
    """Every statement touched what it did when recorded; every measured run succeeded, its
    effect applied (the two recorded runs besides)."""
    mismatched = int(_counter.get(MISMATCH) or 0)  # type: ignore[arg-type]
    if mismatched:
        raise RuntimeError(f"W1 record floor: {mismatched} statements touched other rows")
    done = conn.execute(
        "SELECT count(*) FROM runs r JOIN effects e ON e.run_id = r.id"
        " WHERE r.state = 'succeeded' AND e.status = 'applied'"
    ).fetchone()
    if done is None or done[0] != runs + 2:
        raise RuntimeError(f"W1 record floor: {done} runs succeeded, {runs + 2} expected")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--cpu", action="store_true", help=CPU_HELP)
    parser.add_argument("--pool", choices=POOLS, default="prefork", help="the worker's pool")
    parser.add_argument(
        "--lanes", type=int, default=0, help="the whole machine: this many callers and solo workers"
    )
    parser.add_argument("--caller", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lane", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.caller:  # one of run_lanes' callers
        lane_caller(args.lane, args.runs)
        return
    with exclusive("bench.w1_record_floor"):
        if args.lanes:
            result = run_lanes(args.runs, args.lanes)
        else:
            result = run(args.runs, measure_cpu=args.cpu, pool=args.pool)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"W1 record floor: {result['runs']} runs in {result['seconds']:.2f} s"
        f" = {result['rate']:.1f} runs/s; the machine's CPU per run:"
        f" {result['cpu_ms_per_run']:.2f} ms"
    )
    if "cpu" in result:
        print("  " + cpu.describe(result["cpu"], result["runs"], result["seconds"]))


if __name__ == "__main__":
    main()
