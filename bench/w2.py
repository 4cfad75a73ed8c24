"""W2, waiting is free: 100,000 waiting runs and one worker's memory, and what a sweep costs.

    .venv/bin/python -m bench.w2 [--waiting 100000] [--json]

PostgreSQL and Redis local (broker: Redis DB 14), a scratch database, one
``celery -A worker worker -c 1`` (prefork: a main process and one pool child) on the steps,
resumes and maintenance queues. In order:

1. warm-up: ``--warmup`` runs of the W1 flow ``bench_w1`` through the worker, each through its
   approval interrupt and ``submit_resume`` to success, then one more that is left waiting (the
   template), then sweeps and reaper passes published as beat publishes them (one of each
   untimed, to import their modules, then ``--sweeps`` of each, one at a time);
2. RSS of the worker's main process and of its pool child (``VmRSS`` of /proc/<pid>/status),
   once the worker is idle;
3. ``--waiting`` - 1 more waiting runs, inserted in bulk by this process (SQLAlchemy Core: per
   2,000 runs, one ``INSERT ... SELECT FROM jsonb_to_recordset`` per table, its rows in one
   JSON parameter), then ``VACUUM ANALYZE``, as autovacuum would do soon after. Each is the
   template's rows with new ids: the run (``waiting``, input ``{"n": i}``), its checkpoint,
   its pending ``approval`` interrupt (scope ``{"n": i}``, evidence ``{"amount": i}`` and its
   RFC 8785 hash, a deadline 30 days away) and its four events (enqueue, claim, suspend,
   interrupt), every column copied from what the real path wrote for the template (SQL NULL
   and JSON ``null`` kept apart), its ids replaced wherever they occur. One copy is read back
   and compared with the template, column by column;
4. with them waiting: ``--sweeps`` sweeps and reaper passes again (RSS read again), then
   ``--runs`` more W1 runs through interrupt and resume and one more sweep and reaper pass,
   then RSS again once the worker is idle;
5. a check that the bulk rows are what the real path writes: ``--check`` of them are resumed
   through ``submit_resume`` and finished by the worker.

The sweep's and the reaper's durations are Celery's own ("succeeded in …s", in the pool child,
from the worker's log), median of ``--sweeps``, with one run waiting and with ``--waiting``;
nothing is due in either, so a sweep whose cost follows the due rows costs the same in both.
PASS when neither process grew more than 5 MB (10**6 bytes); exits 1 on FAIL.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import time
import uuid
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import redis
from sqlalchemy import (
    Connection,
    Insert,
    Table,
    Text,
    bindparam,
    cast,
    column,
    create_engine,
    func,
    select,
)
from sqlalchemy.dialects.postgresql import JSONB

from bench import pg, waiting_rows
from bench.processes import (
    BROKER_URL,
    INTERLUDE_QUEUES,
    bench_env,
    children,
    exclusive,
    start_worker,
    stop_worker,
)
from bench.w1 import contract, prepare
from bench.waiting_rows import (
    SQL_NULL,
    RunRows,
    is_json,
    replaced,
    rows_of_run,
    tables,
)

# The goal's 5 MB (decimal), in the KiB that /proc counts in.
LIMIT_KIB = 5_000_000 / 1024
QUEUES = f"{INTERLUDE_QUEUES},interlude.maintenance"
TASK_SWEEP = "interlude.sweep_expired"
TASK_REAP = "interlude.reap"
FAR_DEADLINE = timedelta(days=30)
# Runs per transaction: one statement per table each (events: four rows per run).
RUNS_PER_TRANSACTION = 2_000
POLL_SECONDS = 0.05
TIMEOUT_SECONDS = 900
IDLE_SECONDS = 2.0
BAD_STATES = {"failed", "cancelled", "expired"}


def rss_kib(pid: int) -> int:
    """The resident set of process ``pid``, in KiB (``VmRSS``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError(f"no VmRSS for pid {pid}")


class Worker:
    """The measured ``celery worker -c 1``: its two processes, and its tasks' log lines."""

    def __init__(self, env: dict[str, str]) -> None:
        self.proc = start_worker("bench.w2_app", env, QUEUES, ["-c", "1"])
        self.log: Path = self.proc.log_path  # type: ignore[attr-defined]
        pool = children(self.proc.pid)
        if len(pool) != 1:
            raise RuntimeError(f"expected one pool child of worker {self.proc.pid}, found {pool}")
        self.child = pool[0]

    def rss(self) -> dict[str, int]:
        """RSS of both processes once idle: the last of a few reads a moment apart."""
        time.sleep(IDLE_SECONDS)
        found = {}
        for _ in range(3):
            found = {"parent": rss_kib(self.proc.pid), "child": rss_kib(self.child)}
            time.sleep(0.3)
        if children(self.proc.pid) != [self.child]:
            raise RuntimeError("the worker's pool child was replaced: the measure is void")
        return found

    def run_task(self, name: str) -> tuple[float, str]:
        """Publish task ``name`` as beat would; its duration in the worker, and its result."""
        from worker.app import app
        from worker.engine.tasknames import QUEUE_MAINTENANCE

        task_id = uuid.uuid4().hex
        app.send_task(name, queue=QUEUE_MAINTENANCE, task_id=task_id)
        task = rf"Task {re.escape(name)}\[{task_id}\]"
        succeeded = re.compile(rf"{task} succeeded in ([0-9.e-]+)s: (.*)$", re.M)
        failed = re.compile(rf"{task} (?!received|succeeded).*$", re.M)
        deadline = time.monotonic() + TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            log = self.log.read_text(errors="replace")
            match = succeeded.search(log)
            if match:
                return float(match.group(1)), match.group(2).strip()
            problem = failed.search(log)
            if problem:
                raise RuntimeError(f"{name} did not succeed: {problem.group(0)}")
            time.sleep(POLL_SECONDS)
        raise RuntimeError(f"{name} [{task_id}] not done after {TIMEOUT_SECONDS} s")

    def stop(self) -> None:
        stop_worker(self.proc)


def wait_for(conn: psycopg.Connection[Any], run_ids: list[str], state: str) -> None:
    """Until every run of ``run_ids`` is in ``state``; fails on a run that ended otherwise."""
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while True:
        rows = conn.execute(
            "SELECT state, count(*) FROM runs WHERE id = ANY(%s) GROUP BY state", (run_ids,)
        ).fetchall()
        found = {str(s): int(n) for s, n in rows}
        if found.get(state, 0) == len(run_ids):
            return
        if BAD_STATES & found.keys() or time.monotonic() > deadline:
            raise RuntimeError(f"waiting for {len(run_ids)} runs {state}: by state {found}")
        time.sleep(POLL_SECONDS)


def resume_all(conn: psycopg.Connection[Any], run_ids: list[str], credential: str) -> None:
    """Approve each run's pending interrupt through the gateway, then wait for them to finish."""
    from worker import list_interrupts, submit_resume

    for run_id in run_ids:
        (interrupt,) = list_interrupts(run_id=run_id, status="pending")
        result = submit_resume(contract(interrupt), credential)
        if not result.accepted:
            raise RuntimeError(f"resume refused: {result.outcome.value} ({result.reason})")
    wait_for(conn, run_ids, "succeeded")


def w1_runs(conn: psycopg.Connection[Any], runs: int, credential: str, first: int) -> None:
    """``runs`` real W1 runs: enqueued, each waits on its approval, resumed, finished."""
    from worker import enqueue_run

    run_ids = [enqueue_run("bench_w1", {"n": first + i}) for i in range(runs)]
    wait_for(conn, run_ids, "waiting")
    resume_all(conn, run_ids, credential)


def maintenance(worker: Worker, times: int) -> dict[str, list[float]]:
    """Sweeps and reaper passes, one at a time, as beat publishes them; their durations."""
    durations: dict[str, list[float]] = {"sweep": [], "reap": []}
    for _ in range(times):
        for key, task in (("sweep", TASK_SWEEP), ("reap", TASK_REAP)):
            seconds, handled = worker.run_task(task)
            if handled != "0":
                raise RuntimeError(f"{task} handled {handled} rows; nothing should be due")
            durations[key].append(seconds)
    return durations


def template_rows(conn: Connection, run_id: str) -> RunRows:
    """Every row the real path wrote for the waiting W1 run ``run_id``, table by table."""
    found = rows_of_run(conn, run_id)
    counts = {name: len(rows) for name, rows in found.items()}
    if counts != {"runs": 1, "checkpoints": 1, "interrupts": 1, "events": 4}:
        raise RuntimeError(f"the template run's rows are not W1's waiting shape: {counts}")
    (interrupt,) = found["interrupts"]
    n = found["runs"][0]["input"]["n"]
    if interrupt["scope"] != {"n": n} or interrupt["evidence"] != {"amount": n}:
        raise RuntimeError("bench_w1's interrupt changed: update bench.w2's bulk rows")
    return found


def copies(template: RunRows, count: int, first: int) -> Iterator[RunRows]:
    """``count`` waiting runs shaped as the template, ``n`` from ``first``, in chunks."""
    from models.canonical import evidence_hash
    from models.db import utcnow

    run = template["runs"][0]
    (interrupt,) = template["interrupts"]
    deadline = utcnow() + FAR_DEADLINE
    for start in range(0, count, RUNS_PER_TRANSACTION):
        rows: RunRows = {name: [] for name in template}
        for n in range(first + start, first + min(start + RUNS_PER_TRANSACTION, count)):
            ids = {
                run["id"]: uuid.uuid4().hex,
                template["checkpoints"][0]["id"]: uuid.uuid4().hex,
                interrupt["id"]: uuid.uuid4().hex,
            }
            for name, originals in template.items():
                rows[name].extend(replaced(original, ids) for original in originals)
            rows["runs"][-1]["input"] = {"n": n}
            new = rows["interrupts"][-1]
            new.update(scope={"n": n}, evidence={"amount": n}, deadline=deadline)
            new["evidence_hash"] = evidence_hash(new["evidence"], new["evidence_canon"])
        yield rows


def _insert_from_json(table: Table) -> Insert:
    """``INSERT INTO t (...) SELECT ... FROM jsonb_to_recordset(:rows) AS r(...)``.

    One statement for thousands of rows, sent as one JSON parameter (as the product writes a
    commit's events). JSON columns travel as their text (NULL for SQL NULL) and are cast back;
    the database numbers the rows of a table with an autoincrement key.
    """
    columns = [c for c in table.c if c.autoincrement is not True]
    source = (
        func.jsonb_to_recordset(bindparam("rows", type_=JSONB))
        .table_valued(*[column(c.name, Text if is_json(c) else c.type) for c in columns])
        .render_derived("r", with_types=True)
    )
    picked = [cast(source.c[c.name], JSONB) if is_json(c) else source.c[c.name] for c in columns]
    return table.insert().from_select([c.name for c in columns], select(*picked))


def _encoded(table: Table, row: dict[str, Any]) -> dict[str, Any]:
    """A row as ``_insert_from_json`` reads it: JSON columns as text, timestamps ISO 8601."""
    found = {}
    for c in table.c:
        value = row[c.name]
        if c.autoincrement is True:
            continue
        if is_json(c):
            value = None if value is SQL_NULL else json.dumps(value)
        elif isinstance(value, datetime):
            value = value.isoformat()
        found[c.name] = value
    return found


VARYING = {"input", "scope", "evidence", "evidence_hash", "deadline"}


def check_copy(conn: Connection, template: RunRows, run_id: str) -> None:
    """The rows of bulk run ``run_id`` are the template's but for ids, ``n`` and the deadline."""
    waiting_rows.check_copy(template, template_rows(conn, run_id), VARYING)


def insert_waiting(url: str, template: RunRows, count: int) -> float:
    """Insert ``count`` waiting runs like the template; returns the seconds it took.

    A transaction per ``RUNS_PER_TRANSACTION`` runs, one statement per table in each.
    """
    engine = create_engine(url)
    by_name = tables()
    inserts = {name: _insert_from_json(table) for name, table in by_name.items()}
    started = time.perf_counter()
    try:
        for rows in copies(template, count, first=1_000_000):
            with engine.begin() as conn:
                for name, insert in inserts.items():  # runs first: the others refer to them
                    encoded = [_encoded(by_name[name], row) for row in rows[name]]
                    conn.execute(insert, {"rows": encoded})
        with engine.connect() as conn:
            autocommit = conn.execution_options(isolation_level="AUTOCOMMIT")
            for name in inserts:
                autocommit.exec_driver_sql(f"VACUUM ANALYZE {name}")
    finally:
        engine.dispose()
    return time.perf_counter() - started


def run(waiting: int, warmup: int, runs: int, sweeps: int, check: int) -> dict[str, Any]:
    redis.Redis.from_url(BROKER_URL).flushdb()
    with pg.scratch_database("interlude_w2") as name:
        url = pg.sqlalchemy_url(name)
        credential = prepare(url)
        from models.db import dispose_engines, get_engine
        from worker import enqueue_run

        worker = Worker(bench_env(url))
        conn = psycopg.connect(pg.dsn(name), autocommit=True)
        try:
            w1_runs(conn, warmup, credential, first=0)
            template_id = enqueue_run("bench_w1", {"n": warmup})
            wait_for(conn, [template_id], "waiting")
            with get_engine(url).connect() as sa:
                template = template_rows(sa, template_id)
            maintenance(worker, 1)  # not timed: the first imports the sweep's modules
            few = maintenance(worker, sweeps)
            before = worker.rss()
            inserted = insert_waiting(url, template, waiting - 1)
            row = conn.execute(
                "SELECT id FROM runs WHERE state = 'waiting' AND id <> %s LIMIT 1", (template_id,)
            ).fetchone()
            with get_engine(url).connect() as sa:
                check_copy(sa, template, str(row[0]) if row else "")
            row = conn.execute("SELECT count(*) FROM runs WHERE state = 'waiting'").fetchone()
            count = row[0] if row else 0
            if count != waiting:
                raise RuntimeError(f"expected {waiting} runs waiting, found {count}")
            many = maintenance(worker, sweeps)
            swept = worker.rss()
            w1_runs(conn, runs, credential, first=warmup + 1)
            many_after = maintenance(worker, 1)
            after = worker.rss()
            # The bulk rows are real: the gateway accepts their resumes, the worker ends them.
            bulk = conn.execute(
                "SELECT id FROM runs WHERE state = 'waiting' AND id <> %s LIMIT %s",
                (template_id, check),
            ).fetchall()
            resume_all(conn, [str(row[0]) for row in bulk], credential)
        finally:
            worker.stop()
            conn.close()
            dispose_engines()
    grown = {p: after[p] - before[p] for p in before}
    return {
        "waiting": waiting,
        "warmup_runs": warmup,
        "runs_with_waiting": runs,
        "insert_seconds": inserted,
        "rss_kib": {"before": before, "after_maintenance": swept, "after": after},
        "grown_kib": grown,
        "limit_kib": LIMIT_KIB,
        "passed": all(g <= LIMIT_KIB for g in grown.values()),
        "seconds": {
            "sweep": {"1": few["sweep"], str(waiting): many["sweep"] + many_after["sweep"]},
            "reap": {"1": few["reap"], str(waiting): many["reap"] + many_after["reap"]},
        },
        "bulk_resumed": len(bulk),
    }


def _mb(kib: float, sign: str = "+") -> str:
    """KiB (as /proc counts) in MB (10**6 bytes, as the goal counts)."""
    return f"{kib * 1024 / 1e6:{sign}.2f}"


def report(result: dict[str, Any]) -> str:
    rss = result["rss_kib"]
    waiting = result["waiting"]
    lines = [
        f"W2: {waiting:,} waiting runs ({waiting - 1:,} inserted in bulk in "
        f"{result['insert_seconds']:.1f} s), one worker -c 1 (prefork)",
        f"  warm-up: {result['warmup_runs']} W1 runs; with {waiting:,} waiting: sweeps and "
        f"reaper passes, then {result['runs_with_waiting']} W1 runs through interrupt and resume",
        "  RSS (MB)       warm, 1 waiting   after sweeps   after W1 runs   grown",
    ]
    for process in ("parent", "child"):
        lines.append(
            f"  {process:6s}         {_mb(rss['before'][process], ''):>10s}   "
            f"{_mb(rss['after_maintenance'][process], ''):>12s}   "
            f"{_mb(rss['after'][process], ''):>13s}   {_mb(result['grown_kib'][process]):>6s}"
        )
    for task in ("sweep", "reap"):
        one, many = (result["seconds"][task][k] for k in ("1", str(waiting)))
        lines.append(
            f"  {task:5s} in the worker, nothing due: median {statistics.median(one) * 1000:.1f} "
            f"ms with 1 waiting, {statistics.median(many) * 1000:.1f} ms with {waiting:,} "
            f"waiting (x{statistics.median(many) / statistics.median(one):.2f})"
        )
        for label, seconds in (("1", one), (f"{waiting:,}", many)):
            shown = ", ".join(f"{s * 1000:.1f}" for s in seconds)
            lines.append(f"          ms, {label} waiting: {shown}")
    lines.append(
        f"  {result['bulk_resumed']} bulk-inserted runs resumed and finished by the worker: "
        "the rows are the real path's"
    )
    verdict = "PASS" if result["passed"] else "FAIL"
    lines.append(
        f"{verdict}: growth of each process within {_mb(result['limit_kib'], '')} MB "
        f"(parent {_mb(result['grown_kib']['parent'])}, "
        f"child {_mb(result['grown_kib']['child'])})"
    )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--waiting", type=int, default=100_000)
    parser.add_argument("--warmup", type=int, default=20, help="W1 runs before the first RSS")
    parser.add_argument("--runs", type=int, default=300, help="W1 runs with the runs waiting")
    parser.add_argument("--sweeps", type=int, default=7, help="sweeps and reaps per phase")
    parser.add_argument("--check", type=int, default=20, help="bulk runs resumed at the end")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.waiting < 2 or min(args.warmup, args.runs, args.sweeps) < 1 or args.check < 0:
        parser.error("--waiting must be at least 2; --warmup, --runs, --sweeps at least 1")
    result = run(args.waiting, args.warmup, args.runs, args.sweeps, args.check)
    print(json.dumps(result) if args.json else report(result))
    if not result["passed"]:
        sys.exit(1)


if __name__ == "__main__":
    with exclusive("bench.w2"):
        main()
