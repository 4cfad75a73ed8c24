"""interlude against its rivals on this machine, in one go: runs/s of a three-step run.

    .venv/bin/python -m bench.compare --rivals-python /path/to/venv/bin/python [--runs 200]

The rivals' Python needs ``langgraph langgraph-checkpoint-postgres dbos`` (kept out of our
dependencies). Every system writes to its own fresh PostgreSQL database on the same server and
runs sequentially from one process (interlude: one worker with concurrency 1, through Redis).
The systems take turns for ``--rounds`` rounds and the median of each is reported, so that
the noise of a shared machine falls on all of them alike.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import uuid
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, text

from bench.throughput import PG_ADMIN, bench_bare, bench_interlude

HERE = Path(__file__).resolve().parent


def _rival(python: str, script: str, runs: int) -> float:
    name = f"rival_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_ADMIN, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        url = f"postgresql://postgres@127.0.0.1:5432/{name}"
        out = subprocess.run(
            [python, str(HERE / script), url, str(runs)],
            check=True,
            capture_output=True,
            text=True,
            timeout=600,
        ).stdout
        return float(out.strip().splitlines()[-1])
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rivals-python", required=True)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    python, runs = args.rivals_python, args.runs
    systems: dict[str, Callable[[], float]] = {
        "bare Celery chain (not durable)": lambda: bench_bare(runs, 1),
        "interlude (PostgreSQL, via Redis)": lambda: bench_interlude(runs, "postgresql", 1),
        "LangGraph + PostgresSaver": lambda: _rival(python, "rival_langgraph.py", runs),
        "DBOS": lambda: _rival(python, "rival_dbos.py", runs),
    }
    rates: dict[str, list[float]] = {name: [] for name in systems}
    for _ in range(args.rounds):
        for name, measure in systems.items():
            rates[name].append(measure())
    medians = {name: statistics.median(values) for name, values in rates.items()}
    base = medians["interlude (PostgreSQL, via Redis)"]
    print(f"{runs} three-step runs, median of {args.rounds} rounds")
    for name, rate in medians.items():
        spread = ", ".join(f"{r:.0f}" for r in rates[name])
        print(f"{name:36s} {rate:7.1f} runs/s ({spread})   interlude / this = {base / rate:5.2f}")


if __name__ == "__main__":
    main()
