"""Sweep cost follows the due interrupts, not the waiting ones (PostgreSQL; run by hand).

    .venv/bin/python bench/sweep_bench.py [--repeats 7]

It creates two databases of its own (dropped at the end), bulk-inserts waiting runs with SQL
(100,000 in one, 10,000 in the other), and times ``sweep_expired()`` over 1,000 due
interrupts in each, alternating between the two so that load from elsewhere on the machine
falls on both alike. The admin connection comes from ``INTERLUDE_BENCH_PG``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

from sqlalchemy import Connection, Engine, create_engine, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

ADMIN_URL = os.environ.get(
    "INTERLUDE_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
DUE = 1_000
SCENARIOS = (100_000, 10_000)

RUNS_SQL = """
INSERT INTO runs (id, flow_name, flow_version, input, state, state_version, next_step,
    checkpoint_seq, started_by, lease_epoch, lost_leases, step_attempts, step_executions,
    budget_consumed, dispatched_at, created_at, updated_at)
SELECT :prefix || lpad(g::text, 24, '0'), 'bench', 1, '{"n": 1}'::jsonb, 'waiting', 2,
    'decide', 0, 'app', 1, 0, 0, 1, 0, now(), now(), now()
FROM generate_series(1, :count) AS g
"""

# Half expire, half cancel: the two policies that need no flow code in this process.
INTERRUPTS_SQL = """
INSERT INTO interrupts (id, run_id, name, kind, status, reason, step, checkpoint_id,
    state_version, flow_version, schema_name, schema_version, json_schema, roles, scope,
    evidence, evidence_hash, separate_from_starter, deadline, on_expiry, escalation_level,
    created_at)
SELECT 'i' || :prefix || lpad(g::text, 24, '0'), :prefix || lpad(g::text, 24, '0'),
    'choose', 'approval', 'pending', 'pick an option', 'decide', md5(g::text), 2, 1,
    'bench_choice', 1, '{"type": "object"}'::jsonb, '["approver"]'::jsonb,
    '{"ticket": "T-1"}'::jsonb, '{"offer": "standard"}'::jsonb, 'sha256:' || md5(g::text),
    false, now() + make_interval(secs => :offset), (ARRAY['expire', 'cancel'])[1 + g % 2], 0,
    now() - interval '1 hour'
FROM generate_series(1, :count) AS g
"""

# The sweep's own selection of one batch, for its plan and its execution time alone.
DUE_QUERY = """
SELECT * FROM interrupts WHERE status = 'pending' AND deadline <= now()
AND (put_off_until IS NULL OR put_off_until <= now())
ORDER BY deadline LIMIT 200 FOR UPDATE SKIP LOCKED
"""


def insert_waiting(conn: Connection, prefix: str, count: int, offset_seconds: float) -> None:
    """``count`` waiting runs, each with a pending interrupt due ``offset_seconds`` from now."""
    params = {"prefix": prefix, "count": count, "offset": offset_seconds}
    conn.execute(text(RUNS_SQL), params)
    conn.execute(text(INTERRUPTS_SQL), params)


def analyze(engine: Engine) -> None:
    with engine.connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql(
            "VACUUM ANALYZE interrupts"
        )


def use(url: str) -> None:
    """Point interlude at ``url`` (engines stay pooled per URL, so switching is free)."""
    from models.settings import reset_settings

    os.environ["INTERLUDE_DATABASE_URL"] = url
    reset_settings()


def explain(engine: Engine, *, analyze: bool) -> list[str]:
    """The plan of one batch's selection; with ``analyze`` it runs (and is rolled back)."""
    with engine.connect() as conn:
        verb = "EXPLAIN ANALYZE" if analyze else "EXPLAIN"
        plan = [str(row[0]) for row in conn.exec_driver_sql(f"{verb} {DUE_QUERY}")]
        conn.rollback()
    return plan


def timed_sweep(url: str, engine: Engine, prefix: str) -> tuple[float, float]:
    """Seconds to sweep DUE fresh due interrupts, and milliseconds to select one batch of them."""
    from worker.engine.sweeps import sweep_expired

    with engine.begin() as conn:
        insert_waiting(conn, prefix, DUE, -60)
    analyze(engine)
    plan = explain(engine, analyze=True)
    select_ms = float(plan[-1].split(":")[1].split()[0])  # "Execution Time: 0.2 ms"
    use(url)
    started = time.perf_counter()
    handled = sweep_expired()
    elapsed = time.perf_counter() - started
    if handled != DUE:
        raise SystemExit(f"expected {DUE} handled, the sweep handled {handled}")
    return elapsed, select_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args()
    os.environ["INTERLUDE_FLOWS"] = ""
    admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
    names = {waiting: f"interlude_bench_{uuid.uuid4().hex[:8]}" for waiting in SCENARIOS}
    try:
        from models.db import dispose_engines, get_engine
        from models.migrate import upgrade
        from worker.engine.sweeps import sweep_expired

        urls = {}
        for waiting, name in names.items():
            with admin.connect() as conn:
                conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
            urls[waiting] = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
            upgrade(urls[waiting])
            engine = get_engine(urls[waiting])
            with engine.begin() as conn:
                # Waiting for a day: never due during the benchmark.
                insert_waiting(conn, "w", waiting - DUE, 86_400)
            analyze(engine)
            use(urls[waiting])
            sweep_expired()  # warm up: connections, prepared statements
        plan = explain(get_engine(urls[SCENARIOS[0]]), analyze=False)
        print("a batch is selected by:", " / ".join(line.strip() for line in plan[:3]))
        sweeps: dict[int, list[float]] = {waiting: [] for waiting in SCENARIOS}
        selects: dict[int, list[float]] = {waiting: [] for waiting in SCENARIOS}
        for repeat in range(args.repeats):
            order = SCENARIOS if repeat % 2 == 0 else SCENARIOS[::-1]
            for waiting in order:
                engine = get_engine(urls[waiting])
                elapsed, select_ms = timed_sweep(urls[waiting], engine, f"d{repeat}")
                sweeps[waiting].append(elapsed)
                selects[waiting].append(select_ms)
        for waiting in SCENARIOS:
            shown = ", ".join(f"{t:.2f}" for t in sweeps[waiting])
            print(
                f"{waiting:>7,} waiting, {DUE:,} due: sweep median "
                f"{statistics.median(sweeps[waiting]):.3f} s, best {min(sweeps[waiting]):.3f} s "
                f"({shown}); one batch selected in {statistics.median(selects[waiting]):.2f} ms"
            )
        big, small = SCENARIOS
        print(
            f"ratio {big:,} / {small:,} waiting (x{big // small} waiting, same due): sweep "
            f"median {statistics.median(sweeps[big]) / statistics.median(sweeps[small]):.2f}, "
            f"best {min(sweeps[big]) / min(sweeps[small]):.2f}; batch selection "
            f"{statistics.median(selects[big]) / statistics.median(selects[small]):.2f}"
        )
        dispose_engines()
    finally:
        with admin.connect() as conn:
            for name in names.values():
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.dispose()


if __name__ == "__main__":
    main()
