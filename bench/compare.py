"""interlude against its rivals on this machine, in one go: runs/s of a three-step run.

    .venv/bin/python -m bench.compare --rivals-python /path/to/venv/bin/python [--runs 200]

The rivals' Python needs ``langgraph langgraph-checkpoint-postgres dbos`` (kept out of our
dependencies). Every system writes to its own fresh PostgreSQL database on the same server and
runs sequentially from one process (interlude: one worker with concurrency 1, through Redis).
"""

from __future__ import annotations

import argparse
import subprocess
import uuid
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
    args = parser.parse_args()
    results = {
        "bare Celery chain (not durable)": bench_bare(args.runs, 1),
        "interlude (PostgreSQL, via Redis)": bench_interlude(args.runs, "postgresql", 1),
        "LangGraph + PostgresSaver": _rival(args.rivals_python, "rival_langgraph.py", args.runs),
        "DBOS": _rival(args.rivals_python, "rival_dbos.py", args.runs),
    }
    base = results["interlude (PostgreSQL, via Redis)"]
    for name, rate in results.items():
        print(f"{name:36s} {rate:7.1f} runs/s   interlude / this = {base / rate:5.2f}")


if __name__ == "__main__":
    main()
