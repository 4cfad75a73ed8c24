"""What the server does for each W1 run, statement by statement, beside LangGraph ``sync``.

    .venv/bin/python -m bench.pg_statements --rivals-python PATH [--runs 1000] [--json]

Starts a private PostgreSQL (``bench.pg_instructions.private_server``, not under valgrind) with
``pg_stat_statements`` loaded, counting every statement, those that foreign-key checks run
included, and runs W1 in one process against it: interlude's in-process W1 (the child of
``bench.w1_instructions``: enqueue, the first step, the resume through ``submit_resume``, the
final step with its effect) and LangGraph's (``rival_langgraph_w1.py``, ``durability="sync"``).
Each runs twice, ``WARM`` runs and ``WARM`` + N, with the server's counters reset before each:
what the second counted more, over N, is what each further run costs, without the migration,
the first plans and the connections' set-up. Per run: each statement's executions, its time
in the server, the buffers it touched, the WAL records and bytes it wrote; and from
``pg_stat_wal`` all the WAL written and the flushes (``wal_sync``), the commits' included.

Counts are exact. Times are the server's own clock on a shared machine: compare them within
one run. A statement run inside another (a foreign-key check) is counted on its own line and
inside its parent's time too. Needs what ``bench.pg_instructions`` needs, valgrind apart.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psycopg

from bench import pg
from bench.pg_instructions import private_server
from bench.processes import exclusive
from bench.w1_instructions import ROOT, run_child

WARM = 100
SETTINGS = "shared_preload_libraries = 'pg_stat_statements'\npg_stat_statements.track = 'all'\n"
# Per-run statements: executed at least once every other run (start-up ones cancel out).
PER_RUN = 0.5
# A backend reports its WAL counters when idle, at most a second after its last transaction.
STATS_FLUSH_SECONDS = 1.5
# By text: a statement's queryid names its tables' OIDs, which differ in each new database.
STATEMENTS = """
SELECT regexp_replace(query, '\\s+', ' ', 'g') AS text, sum(calls), sum(total_exec_time),
       sum(shared_blks_hit + shared_blks_read), sum(wal_records), sum(wal_bytes)
FROM pg_stat_statements GROUP BY text
"""
WAL = "SELECT wal_records, wal_bytes, wal_sync FROM pg_stat_wal"
Workload = Callable[[int], None]


@dataclass(frozen=True)
class Counted:
    """The server's counters after a workload: by statement's text (executions, total
    milliseconds, buffers, WAL records, WAL bytes), and all the WAL (records, bytes, flushes)."""

    statements: dict[str, tuple[float, float, float, float, float]]
    wal: tuple[float, float, float]


def counted(dsn: str, workload: Workload, runs: int) -> Counted:
    """The server's counters over ``workload`` doing ``runs`` runs, reset before it."""
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute("SELECT pg_stat_statements_reset()")
        admin.execute("SELECT pg_stat_reset_shared('wal')")
    workload(runs)
    time.sleep(STATS_FLUSH_SECONDS)
    with psycopg.connect(dsn, autocommit=True) as admin:
        statements = {
            str(row[0]): tuple(float(v) for v in row[1:]) for row in admin.execute(STATEMENTS)
        }
        wal = admin.execute(WAL).fetchone()
    assert wal is not None
    return Counted(statements, (float(wal[0]), float(wal[1]), float(wal[2])))


def per_run(warm: Counted, more: Counted, runs: int) -> dict[str, Any]:
    """What ``more`` (``runs`` runs more than ``warm``) counted more, per run."""
    statements = []
    for text, after in more.statements.items():
        before = warm.statements.get(text, (0.0, 0.0, 0.0, 0.0, 0.0))
        calls, exec_ms, buffers, records, wal_bytes = (
            (a - b) / runs for a, b in zip(after, before, strict=True)
        )
        if calls >= PER_RUN:
            statements.append(
                {
                    "statement": text,
                    "calls": calls,
                    "exec_us": 1000 * exec_ms,
                    "buffers": buffers,
                    "wal_records": records,
                    "wal_bytes": wal_bytes,
                }
            )
    statements.sort(key=lambda s: -s["exec_us"])
    records, wal_bytes, flushes = ((a - b) / runs for a, b in zip(more.wal, warm.wal, strict=True))
    return {
        "statements": statements,
        "wal_records": records,
        "wal_bytes": wal_bytes,
        "wal_flushes": flushes,
    }


def interlude(dsn: str) -> Workload:
    def workload(runs: int) -> None:
        run_child(ROOT, runs, env={"INTERLUDE_BENCH_PG_DSN": dsn})

    return workload


def langgraph(dsn: str, python: str) -> Workload:
    script = str(ROOT / "bench" / "rival_langgraph_w1.py")

    def workload(runs: int) -> None:
        # A database of its own each time, as interlude's child makes one.
        with pg.scratch_database("rival", admin=dsn) as name:
            url = pg.dsn(name, admin=dsn)
            for arguments in (["setup"], [str(runs), "sync"]):
                subprocess.run([python, script, url, *arguments], check=True, capture_output=True)

    return workload


def measure(runs: int, rivals_python: str) -> dict[str, Any]:
    with private_server(callgrind=False, settings=SETTINGS) as (dsn, _):
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute("CREATE EXTENSION pg_stat_statements")
        found = {}
        for name, workload in (
            ("interlude", interlude(dsn)),
            ("LangGraph sync", langgraph(dsn, rivals_python)),
        ):
            warm = counted(dsn, workload, WARM)
            found[name] = per_run(warm, counted(dsn, workload, WARM + runs), runs)
    return found


def report(found: dict[str, Any]) -> str:
    lines = []
    for name, costs in found.items():
        statements = costs["statements"]
        lines += [
            f"{name}, per W1 run: {sum(s['calls'] for s in statements):.2f} statements, "
            f"{sum(s['exec_us'] for s in statements):.0f} µs executing (a foreign-key check "
            f"counted in its parent too), {costs['wal_records']:.1f} WAL records, "
            f"{costs['wal_bytes']:.0f} bytes of WAL, {costs['wal_flushes']:.2f} flushes",
            "  calls   µs  buffers  WAL records  WAL bytes  statement",
        ]
        lines += [
            f"  {s['calls']:5.2f} {s['exec_us']:5.0f} {s['buffers']:8.1f} {s['wal_records']:12.1f}"
            f" {s['wal_bytes']:10.0f}  {s['statement'][:90]}"
            for s in statements
        ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rivals-python", required=True, help="a Python with LangGraph")
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    with exclusive("bench.pg_statements"):
        found = measure(args.runs, args.rivals_python)
    print(json.dumps(found) if args.json else report(found))


if __name__ == "__main__":
    main()
