"""Starting a real ``celery -A worker worker`` (or ``beat``) process and waiting until it is up.

Used by the demo and the tests. The process gets its own process group so that stopping it
also stops its pool children; its output goes to a log file, read for the ready marker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

# What each kind of process logs once it accepts work.
READY_MARKERS = {"worker": b" ready.", "beat": b"beat: Starting"}
START_SECONDS = 30.0
STOP_SECONDS = 15.0


class ProcessStartError(RuntimeError):
    """The process exited, or did not log its ready marker in time; carries its log's tail."""


def start_celery(
    kind: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path | None = None,
    timeout: float = START_SECONDS,
) -> subprocess.Popen[bytes]:
    """Start ``celery -A worker <kind> <args>`` and return it once it logged that it is ready."""
    marker = READY_MARKERS[kind]
    # The ready marker is logged at INFO.
    command = [sys.executable, "-m", "celery", "-A", "worker", kind, "-l", "info", *args]
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            command,
            cwd=cwd,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in log_path.read_bytes():
            return process
        if process.poll() is not None:
            break
        time.sleep(0.1)
    stop_process(process)
    tail = log_path.read_text(errors="replace")[-3000:]
    raise ProcessStartError(f"celery {kind} did not start (log {log_path}):\n{tail}")


def stop_process(process: subprocess.Popen[bytes], timeout: float = STOP_SECONDS) -> None:
    """SIGTERM the process group (a warm shutdown), SIGKILL it if it is still there after."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_process(process)


def kill_process(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL the whole process group: the main process and its pool children."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(STOP_SECONDS)
