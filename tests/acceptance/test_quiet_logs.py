"""An idle worker and beat write almost nothing: beat's sweeps and reaper passes go to DEBUG
unless a pass did something (real worker and beat processes)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path

from models import runs as run_store
from models.db import transaction
from tests.services import WorkerProcess, wait_for

INTERVAL = "0.2"
IDLE_SECONDS = 4.0
# Celery's lines about a task name it as "Task <name>[<id>]" (the banner lists them bare).
ROUTINE = ("Task interlude.sweep_expired[", "Task interlude.reap[")


def _lines_about(process: WorkerProcess, names: tuple[str, ...]) -> list[str]:
    return [line for line in process.output().splitlines() if any(n in line for n in names)]


def test_an_idle_worker_and_beat_do_not_log_every_sweep_but_a_pass_that_did_something(
    db: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # Given a worker and beat sweeping and reaping five times a second, with nothing to do
    timings = {
        "INTERLUDE_SWEEP_INTERVAL": INTERVAL,
        "INTERLUDE_REAP_INTERVAL": INTERVAL,
        "INTERLUDE_REDISPATCH_AFTER": "0.5",
    }
    worker = start_worker("-c", "1", **timings)
    beat = start_worker("-s", str(tmp_path / "beat-schedule"), kind="beat", **timings)
    time.sleep(IDLE_SECONDS)
    # Then at INFO neither says a word about the passes (some 40 of them)
    assert _lines_about(worker, ROUTINE) == []
    assert _lines_about(beat, ("Sending due task",)) == []
    # ... and beat's scheduler says it is alive where the compose healthcheck looks
    alive = tmp_path / "beat-schedule.alive"
    assert time.time() - alive.stat().st_mtime < 2.0

    # When a pass finds something to do (a run queued for a version no worker has, which the
    # reaper publishes again)
    with transaction() as session:
        run_id = run_store.insert_run(
            session,
            flow_name="three_steps",
            flow_version=7,
            input={},
            first_step="first",
            idempotency_key=None,
            started_by="test",
            budget=None,
        ).id
    # Then that pass keeps its lines: what it did, and the task's count
    wait_for(lambda: f"republished [run {run_id}" in worker.output(), timeout=30)
    counted = wait_for(
        lambda: [ln for ln in _lines_about(worker, ("Task interlude.reap[",)) if "succeeded" in ln],
        timeout=30,
    )
    assert counted[0].rstrip().endswith(": 1"), counted
