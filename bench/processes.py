"""Start and stop the ``celery worker`` processes the benchmarks measure, as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BROKER_URL = "redis://127.0.0.1:6379/14"
COUNTER_URL = "redis://127.0.0.1:6379/13"
INTERLUDE_QUEUES = "interlude.steps,interlude.resumes"


def start_worker(
    app: str, env: dict[str, str], queues: str, pool: list[str]
) -> subprocess.Popen[bytes]:
    """``celery -A app worker <pool>`` on ``queues``; returns once it says ``ready.``."""
    log = Path(tempfile.mkdtemp(prefix="bench-")) / "worker.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            *pool,
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            queues,
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    while b"ready." not in log.read_bytes():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(f"worker did not start:\n{log.read_text()}")
        time.sleep(0.05)
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Warm shutdown (SIGTERM), so that every process of the worker runs its shutdown hooks."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def bench_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a measured interlude process (worker or caller)."""
    return {
        **os.environ,
        "INTERLUDE_DATABASE_URL": database_url,
        "INTERLUDE_BROKER_URL": BROKER_URL,
        "INTERLUDE_FLOWS": "bench.flows",
        **extra,
    }
