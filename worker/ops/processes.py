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
from typing import Protocol

# What each kind of process logs once it accepts work.
READY_MARKERS = {"worker": b" ready.", "beat": b"beat: Starting"}
START_SECONDS = 30.0
STOP_SECONDS = 15.0


class ProcessStartError(RuntimeError):
    """The process exited, or did not log its ready marker in time; carries its log's tail."""


class Process(Protocol):
    """What is needed of a started process: a ``subprocess.Popen``, or a process the tests
    fork from one that has imported Celery already."""

    @property
    def pid(self) -> int: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...


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
    with log_path.open("ab") as log:
        process = subprocess.Popen(
            celery_command(kind, args),
            cwd=cwd,
            env=dict(env),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    wait_until_ready(process, kind, log_path, timeout)
    return process


def celery_command(kind: str, args: Sequence[str]) -> list[str]:
    """``celery -A worker <kind>`` with this Python; its ready marker is logged at INFO."""
    return [sys.executable, "-m", "celery", "-A", "worker", kind, "-l", "info", *args]


def wait_until_ready(process: Process, kind: str, log_path: Path, timeout: float) -> None:
    """Return once ``process`` logged its ready marker; else stop it and raise
    ``ProcessStartError`` with its log's tail."""
    marker = READY_MARKERS[kind]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if marker in log_path.read_bytes():
            return
        if process.poll() is not None:
            break
        time.sleep(0.1)
    stop_process(process)
    tail = log_path.read_text(errors="replace")[-3000:]
    raise ProcessStartError(f"celery {kind} did not start (log {log_path}):\n{tail}")


def stop_process(process: Process, timeout: float = STOP_SECONDS) -> None:
    """SIGTERM the process group (a warm shutdown), SIGKILL it if it is still there after."""
    if process.poll() is not None:
        return
    os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        kill_process(process)


def kill_process(process: Process) -> None:
    """SIGKILL the whole process group: the main process and its pool children."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait(STOP_SECONDS)
