"""The engine on a threads-pool worker: many steps of one process at once (real processes).

Agent steps mostly wait on I/O, so users run ``-P threads -c N``. Every step then shares the
process's database pool and lease keeper; these tests show nothing is lost, repeated or mixed
up between the threads.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from sqlalchemy import select

from models.db import transaction
from models.tables import Checkpoint, Effect
from tests.flows.effects import applied, calls
from tests.resumes import contract_for, wait_finished, wait_pending
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, submit_resume

pytestmark = pytest.mark.slow

RUNS = 40


def test_steps_effects_and_resumes_on_a_threads_pool(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given one worker running steps on 8 threads
    worker = start_worker("-P", "threads", "-c", "8")
    credential = add_actor("alice", ["approver"])
    # When runs with sleeping steps and an effect, and runs waiting on an approval, start at once
    steady = [enqueue_run("effect_steady", {"sleep": 0.05}) for _ in range(RUNS)]
    asking = [enqueue_run("effect_then_interrupt", {}) for _ in range(RUNS // 4)]
    # And every approval is answered as soon as it is asked
    for run_id in asking:
        interrupt = wait_pending(run_id, timeout=120)
        result = submit_resume(contract_for(interrupt, "alice", input={"go": True}), credential)
        assert result.outcome == "accepted", result.reason
    # Then every run succeeds
    for run_id in steady + asking:
        assert wait_finished(run_id, timeout=180) == "succeeded", get_run(run_id).error
    # And each effect reached the outside world exactly once, recorded applied once
    for run_id in steady + asking:
        assert (calls(run_id), applied(run_id)) == (1, 1)
    with transaction(readonly=True) as session:
        statuses = session.execute(
            select(Effect.run_id, Effect.status).where(Effect.run_id.in_(steady + asking))
        ).all()
        seqs: dict[str, list[int]] = {}
        for run_id, seq in session.execute(
            select(Checkpoint.run_id, Checkpoint.seq)
            .where(Checkpoint.run_id.in_(steady))
            .order_by(Checkpoint.run_id, Checkpoint.seq)
        ):
            seqs.setdefault(run_id, []).append(seq)
    assert sorted(status for _, status in statuses) == ["applied"] * len(steady + asking)
    # And every step of every run was checkpointed once, in order
    assert all(found == [0, 1, 2, 3] for found in seqs.values()) and len(seqs) == RUNS
    # And the worker ran them side by side on its threads
    wait_for(lambda: "ForkPoolWorker" not in worker.output(), timeout=5)
