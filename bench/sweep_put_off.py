"""What interrupts a sweep cannot handle cost the sweeps after it (PostgreSQL; run by hand).

    .venv/bin/python bench/sweep_put_off.py [--stuck 10000] [--due 200] [--repeats 5]

It creates a database of its own (dropped at the end) and bulk-inserts ``--stuck`` waiting
runs whose interrupts are an hour past their deadline with the ``default`` policy, of a flow
this process does not have: the sweep cannot check their default, so it defers every one of
them. A first sweep meets them all. Then each repeat inserts ``--due`` fresh interrupts with the
``expire`` policy, due now, and times the sweep that handles them: what the stuck ones cost
every sweep after the first. The admin connection comes from ``INTERLUDE_BENCH_PG``. It runs
as well on a checkout from before rows were put off (to compare).
"""

from __future__ import annotations

import argparse
import logging
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import Connection, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.sweep_bench import ADMIN_URL, RUNS_SQL, analyze, use

INTERRUPTS_SQL = """
INSERT INTO interrupts (id, run_id, name, kind, status, reason, step, checkpoint_id,
    state_version, flow_version, schema_name, schema_version, json_schema, roles, scope,
    evidence, evidence_hash, separate_from_starter, deadline, on_expiry, default_input,
    escalation_level, created_at)
SELECT 'i' || :prefix || lpad(g::text, 24, '0'), :prefix || lpad(g::text, 24, '0'),
    'choose', 'approval', 'pending', 'pick an option', 'decide', md5(g::text), 2, 1,
    'bench_choice', 1, '{"type": "object"}'::jsonb, '["approver"]'::jsonb,
    '{"ticket": "T-1"}'::jsonb, '{"offer": "standard"}'::jsonb, 'sha256:' || md5(g::text),
    false, now() + make_interval(secs => :offset), :policy, '{"choice": "x"}'::jsonb, 0,
    now() - interval '2 hours'
FROM generate_series(1, :count) AS g
"""


def insert(conn: Connection, prefix: str, count: int, offset: float, policy: str) -> None:
    params = {"prefix": prefix, "count": count, "offset": offset, "policy": policy}
    conn.execute(text(RUNS_SQL), params)
    conn.execute(text(INTERRUPTS_SQL), params)


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--stuck", type=int, default=10_000)
    parser.add_argument("--due", type=int, default=200)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    os.environ["INTERLUDE_FLOWS"] = ""
    # One warning per deferred row: thousands of lines that say nothing new here.
    logging.disable(logging.WARNING)
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"interlude_bench_{uuid.uuid4().hex[:8]}"
    try:
        from models.db import dispose_engines, get_engine
        from models.migrate import upgrade
        from worker.engine.sweeps import sweep_expired, sweep_report

        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
        upgrade(url)
        engine = get_engine(url)
        with engine.begin() as conn:
            insert(conn, "s", args.stuck, -3600, "default")
        analyze(engine)
        use(url)
        # Until every stuck row was met once (a sweep starts no new batch after one beat
        # interval, so that may take several).
        started = time.perf_counter()
        met = sweeps = 0
        while met < args.stuck:
            report = sweep_report()
            met += report.deferred + report.failed
            sweeps += 1
            if sweeps > 10 * args.stuck:
                raise SystemExit(f"the stuck rows were not all met: {met} of {args.stuck}")
        print(
            f"{args.stuck:,} stuck, met once by {sweeps} sweep(s): "
            f"{time.perf_counter() - started:.2f} s"
        )
        times = []
        for repeat in range(args.repeats):
            with engine.begin() as conn:
                insert(conn, f"d{repeat}", args.due, -1, "expire")
            started = time.perf_counter()
            handled = sweep_expired()
            times.append(time.perf_counter() - started)
            if handled != args.due:
                raise SystemExit(
                    f"expected {args.due} handled, the sweep handled {handled}; "
                    f"another sweep: {sweep_report()}"
                )
        shown = ", ".join(f"{t:.3f}" for t in times)
        print(
            f"then {args.due} due each time, {args.stuck:,} stuck: sweep median "
            f"{statistics.median(times):.3f} s ({shown})"
        )
        dispose_engines()
    finally:
        with admin.connect() as conn:
            conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
