"""The console's pages on 10,000 runs: how long a real ``interlude serve`` takes to answer them.

    .venv/bin/python -m bench.console [--runs 10000] [--requests 40] [--sqlite]

It creates a database of its own (PostgreSQL from ``INTERLUDE_BENCH_PG``, dropped at the end;
or a SQLite file with ``--sqlite``), runs a few real runs of ``bench_three_steps`` in-process
(their steps, checkpoints, events) and inserts the rest as rows of two flows in every state,
started by five actors over thirty days (on PostgreSQL then ``VACUUM ANALYZE``, as autovacuum
would soon do). Then it signs an operator in to a real ``interlude serve`` and times each page
over HTTP on the loopback (median and 95th percentile of ``--requests`` requests, after two to
warm up). The goal: every page within 100 ms.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

ADMIN_URL = os.environ.get(
    "INTERLUDE_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
FLOWS = "bench.flows"
REAL_RUNS = 5
GOAL_MS = 100.0
SERVE = "import sys; from worker.cli import main; sys.exit(main())"
STATES = ["succeeded", "succeeded", "succeeded", "waiting", "failed", "cancelled", "queued"]
STARTERS = ["ada", "bob", "cy", "dee", "svc-orders"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def fill(url: str, count: int) -> list[str]:
    """``count`` runs in the database at ``url``; the ids of the real ones (newest first)."""
    from sqlalchemy import insert

    from models.db import get_engine, utcnow
    from models.migrate import upgrade
    from models.storable import new_id
    from models.tables import Checkpoint, Run
    from worker import enqueue_run
    from worker.testing import recording

    upgrade(url)
    real = []
    with recording() as recorder:
        for n in range(REAL_RUNS):
            real.append(enqueue_run("bench_three_steps", {"n": n}, started_by="ada"))
        recorder.drain()
    now = utcnow()
    runs, checkpoints = [], []
    for n in range(count - REAL_RUNS):
        run_id = new_id()
        at = now - timedelta(seconds=30 + n * (30 * 86_400 / count))
        state = STATES[n % len(STATES)]
        runs.append(
            {
                "id": run_id,
                "flow_name": "bench_three_steps" if n % 3 else "bench_w1",
                "flow_version": 1,
                "input": {"n": n, "order": f"o-{n}"},
                "state": state,
                "state_version": 3,
                "next_step": None if state in ("succeeded", "cancelled") else "second",
                "checkpoint_seq": 0,
                "started_by": STARTERS[n % len(STARTERS)],
                "lease_epoch": 1,
                "lost_leases": 0,
                "step_attempts": 0,
                "step_executions": 1,
                "budget_consumed": 0.0,
                "created_at": at,
                "updated_at": at,
            }
        )
        checkpoints.append(
            {
                "id": new_id(),
                "run_id": run_id,
                "seq": 0,
                "step": None,
                "next_step": "first",
                "state": {},
                "budget_consumed": 0.0,
                "effects": [],
                "epoch": 0,
                "created_at": at,
            }
        )
    with get_engine(url).begin() as conn:
        conn.execute(insert(Run.__table__), runs)
        conn.execute(insert(Checkpoint.__table__), checkpoints)
    if url.startswith("postgresql"):
        # As autovacuum soon does after a bulk of inserts: without the statistics and the
        # visibility map, the counts read every row's heap page (0.6 s at a million runs).
        with get_engine(url).connect() as conn:
            conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("VACUUM ANALYZE")
    return list(reversed(real))


def serve(url: str, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    env = {**os.environ, "INTERLUDE_DATABASE_URL": url, "INTERLUDE_FLOWS": FLOWS}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-c", SERVE, "serve", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            if httpx.get(base + "/healthz", timeout=2).status_code == 200:
                return proc, base
        except httpx.TransportError:
            time.sleep(0.1)
    stop(proc)
    raise SystemExit(f"interlude serve did not start:\n{log.read_text()[-2000:]}")


def stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(15)


def signed_in(base: str, actor: str, credential: str) -> httpx.Client:
    client = httpx.Client(base_url=base, timeout=30)
    page = client.get("/inbox/signin").text
    token = re.search(r'name="csrf" value="([^"]+)"', page)
    assert token is not None
    client.post(
        "/inbox/signin",
        data={"csrf": token.group(1), "actor_id": actor, "credential": credential},
    )
    return client


def cpu_seconds(pid: int) -> float:
    """CPU time (user + system) the process has used so far (Linux's /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def timed(client: httpx.Client, path: str, requests: int, pid: int) -> tuple[float, float, float]:
    """Median and 95th percentile milliseconds of ``path`` (each answer must be a 200), and
    the server's CPU milliseconds per request: the figure a loaded machine does not inflate."""
    took = []
    cpu = 0.0
    for n in range(requests + 2):
        if n == 2:
            cpu = cpu_seconds(pid)
        started = time.perf_counter()
        response = client.get(path)
        elapsed = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            raise SystemExit(f"{path} answered {response.status_code}: {response.text[:300]}")
        if n >= 2:
            took.append(elapsed)
    cpu_ms = (cpu_seconds(pid) - cpu) * 1000 / requests
    took.sort()
    return statistics.median(took), took[max(0, round(len(took) * 0.95) - 1)], cpu_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=10_000)
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--sqlite", action="store_true", help="a SQLite file, not PostgreSQL")
    args = parser.parse_args()
    os.environ["INTERLUDE_FLOWS"] = FLOWS
    scratch = Path(tempfile.mkdtemp(prefix="interlude-console-bench-"))
    admin = None
    name = f"interlude_bench_{uuid.uuid4().hex[:8]}"
    if args.sqlite:
        url = f"sqlite:///{scratch / 'bench.db'}"
    else:
        from sqlalchemy import create_engine

        admin = create_engine(ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.exec_driver_sql(f'CREATE DATABASE "{name}"')
        url = ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"
    os.environ["INTERLUDE_DATABASE_URL"] = url
    proc = None
    try:
        from models.db import dispose_engines
        from models.settings import reset_settings
        from worker import add_actor

        reset_settings()
        started = time.perf_counter()
        real = fill(url, args.runs)
        credential = add_actor("olga", ["operator"])
        print(f"{args.runs} runs in {time.perf_counter() - started:.1f}s ({url.split(':')[0]})")
        dispose_engines()
        proc, base = serve(url, scratch / "serve.log")
        client = signed_in(base, "olga", credential)
        try:
            first = client.get("/console/runs").text
            cursor = re.search(r'cursor=([^&"]+)', first)
            pages = {
                "runs, all (counts over every run)": "/console/runs",
                "runs, flow + state": "/console/runs?flow=bench_w1&state=waiting",
                "runs, started by + age": "/console/runs?started_by=bob&older_than=86400",
                "runs, second page": f"/console/runs?cursor={cursor.group(1) if cursor else ''}",
                "one run": f"/console/runs/{real[0]}",
                "one run by prefix": f"/console/runs/{real[0][:8]}",
                "fork confirmation": f"/console/runs/{real[0]}/fork?step=second",
                "inbox": "/inbox",
            }
            print(f"{'page':38} {'median ms':>10} {'p95 ms':>8} {'server CPU ms':>14}")
            worst = 0.0
            for label, path in pages.items():
                median, p95, cpu = timed(client, path, args.requests, proc.pid)
                worst = max(worst, p95)
                print(f"{label:38} {median:10.1f} {p95:8.1f} {cpu:14.1f}")
        finally:
            client.close()
        verdict = "within" if worst <= GOAL_MS else "OVER"
        print(f"slowest p95 {worst:.1f} ms: {verdict} the {GOAL_MS:.0f} ms goal")
        print(f"load average while measured: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    finally:
        if proc is not None:
            stop(proc)
        from models.db import dispose_engines

        dispose_engines()
        if admin is not None:
            with admin.connect() as conn:
                conn.exec_driver_sql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
