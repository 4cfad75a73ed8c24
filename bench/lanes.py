"""Processes measured together: started at once, the machine's CPU read around their work.

``run`` starts every command, waits until each says it is ready (``machine_cpu.wait_for_go``:
imports done, graph compiled, connections open where the system opens them at its start),
reads the machine's busy CPU and the clock, tells them all to go, and reads each one's result
(the first line it prints after the start that is a JSON object with ``runs``) as it ends.
The timed part is from the start signal to the last result read; the machine's CPU over it,
divided by all their runs, is what a run cost the machine, whoever spent it (workers and
servers running beside them included). What each process spent over the same stretch is read
too (``bench.cpu``), by role: the measured processes ("caller": interlude's callers, or a
rival's processes, which do all of its Python), the ``workers`` given and their children,
PostgreSQL, Redis, the rest. The processes are told to end only after it is read, so that
their server backends still live (``machine_cpu.report_result``).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Collection, Sequence
from typing import IO, Any, NoReturn

from bench import cpu as processes_cpu
from bench.machine_cpu import LANE_ENV, READY, busy_seconds

READY_TIMEOUT_SECONDS = 120
END_TIMEOUT_SECONDS = 60


class Lane:
    """One measured process; its stderr goes to a file, so that much logging never blocks it."""

    def __init__(self, command: Sequence[str], env: dict[str, str], cwd: str | None) -> None:
        self.errors: IO[str] = tempfile.TemporaryFile(mode="w+")  # noqa: SIM115 (closed in kill)
        self.proc = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.errors,
            text=True,
            env=env,
            cwd=cwd,
        )

    def await_ready(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip() == READY:
                return
        self.fail("ended before it was ready")

    def go(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()

    def result(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("{"):
                found: dict[str, Any] = json.loads(line)
                return found
        self.fail("ended without a result")

    def end(self) -> None:
        """Tell the process to end (after its result), wait for it to, or stop it."""
        assert self.proc.stdin is not None
        # (BrokenPipeError: it has ended already, without waiting for the word.)
        with contextlib.suppress(BrokenPipeError):
            self.proc.stdin.write("end\n")
            self.proc.stdin.flush()
        try:
            code = self.proc.wait(END_TIMEOUT_SECONDS)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            self.fail("did not end after its result")
        if code != 0:
            self.fail(f"exited {code} after its result")

    def kill(self) -> None:
        """Stop the process if it still runs, and close its pipes and its stderr's file."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        for pipe in (self.proc.stdin, self.proc.stdout):
            if pipe is not None:
                # (BrokenPipeError: its reader is gone, nothing left to flush.)
                with contextlib.suppress(BrokenPipeError):
                    pipe.close()
        self.errors.close()

    def fail(self, what: str) -> NoReturn:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.errors.seek(0)
        raise RuntimeError(f"{' '.join(self.proc.args)} {what}:\n{self.errors.read()[-3000:]}")  # type: ignore[arg-type]


def run(
    commands: Sequence[Sequence[str]],
    *,
    env: dict[str, str] | None = None,
    cwd: str | None = None,
    workers: Collection[int] = (),
) -> dict[str, Any]:
    """Every command at once; their runs together per second, the machine's CPU per run and
    each role's (``workers``: the main processes of the workers that serve them)."""
    environment = {**(env if env is not None else os.environ), LANE_ENV: "1"}
    lanes = [Lane(command, environment, cwd) for command in commands]
    try:
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        for lane in lanes:
            lane.await_ready()
            if time.monotonic() > deadline:
                lane.fail("took too long to get ready")
        before = processes_cpu.snapshot()
        cpu_before, start = busy_seconds(), time.monotonic()
        for lane in lanes:
            lane.go()
        results = [lane.result() for lane in lanes]
        seconds, cpu = time.monotonic() - start, busy_seconds() - cpu_before
        by_role = processes_cpu.by_role(
            before,
            processes_cpu.snapshot(),
            callers={lane.proc.pid for lane in lanes},
            workers=workers,
        )
        for lane in lanes:
            lane.end()
    finally:
        for lane in lanes:
            lane.kill()
    runs = sum(int(r["runs"]) for r in results)
    return {
        "runs": runs,
        "seconds": seconds,
        "rate": runs / seconds,
        "cpu_ms_per_run": 1000 * cpu / runs,
        "cores_busy": cpu / seconds,
        "cpu_ms_per_run_by_role": processes_cpu.ms_per_run(by_role, runs),
        "lanes": results,
    }
