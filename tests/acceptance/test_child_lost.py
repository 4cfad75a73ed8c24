"""A pool child killed mid-step (as the OOM killer does) has its run requeued at once by the
worker's main process: the step runs again without waiting for the lease and the reaper."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable

from models.db import transaction
from models.tables import Event, Run
from tests.flows.expiry import _redis
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run

# Long enough that only the main process's requeue can explain a second execution within the
# test: no beat runs (so no reaper), and the lease outlasts the wait below.
LEASE_SECONDS = "300"


def _owner(run_id: str) -> str | None:
    with transaction(readonly=True) as session:
        run = session.get_one(Run, run_id)
        return run.lease_owner if run.state == "running" else None


def test_a_killed_pool_child_s_run_is_requeued_at_once(
    db: str, scratch: None, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a prefork worker (no beat) running a step that holds its run
    start_worker("-c", "1", INTERLUDE_LEASE_SECONDS=LEASE_SECONDS)
    run_id = enqueue_run("held", {})
    outside = _redis()
    wait_for(lambda: outside.get(f"held:started:{run_id}") == b"1", timeout=60)
    owner = wait_for(lambda: _owner(run_id), timeout=10)
    # When its pool child is killed
    os.kill(int(owner.rsplit(":", 1)[1]), signal.SIGKILL)
    # Then the step starts again, under a new epoch, long before the dead child's lease ends
    wait_for(lambda: outside.get(f"held:started:{run_id}") == b"2", timeout=60)
    outside.set(f"held:release:{run_id}", 1)
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=60)
    # And the run's trail says why: a requeue naming the dead owner, by the reaper's rules
    with transaction(readonly=True) as session:
        requeues = [
            e.detail
            for e in session.query(Event).filter(Event.run_id == run_id, Event.trigger == "requeue")
        ]
    assert len(requeues) == 1
    assert requeues[0]["owner"] == owner
    assert requeues[0]["note"] == "its process died"
    assert requeues[0]["lost_leases"] == 1
