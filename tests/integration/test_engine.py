"""The run engine with a real Redis broker and real worker processes."""

from __future__ import annotations

from sqlalchemy import select

from models.db import transaction
from models.tables import Checkpoint, Event
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run


def _finished(run_id: str) -> bool:
    return get_run(run_id).state in {"succeeded", "failed", "cancelled", "expired"}


def test_three_step_flow_completes_with_contiguous_checkpoints(
    db: str, shared_worker: WorkerProcess
) -> None:
    # Given a three-step flow started from application code
    run_id = enqueue_run("three_steps", {"n": 5})
    # When the worker runs it to the end
    wait_for(lambda: _finished(run_id), timeout=30)
    # Then it succeeded with the state the steps built
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output == {"trail": ["first", "second", "third"], "n": 7}
    assert run.checkpoints == 4
    with transaction(readonly=True) as session:
        seqs = session.execute(
            select(Checkpoint.seq, Checkpoint.step)
            .where(Checkpoint.run_id == run_id)
            .order_by(Checkpoint.seq)
        ).all()
        events = session.execute(
            select(Event.trigger, Event.from_state, Event.to_state)
            .where(Event.run_id == run_id, Event.to_state.is_not(None))
            .order_by(Event.id)
        ).all()
    assert [tuple(s) for s in seqs] == [(0, None), (1, "first"), (2, "second"), (3, "third")]
    assert [tuple(e) for e in events] == [
        ("enqueue", None, "queued"),
        ("claim", "queued", "running"),
        ("advance", "running", "queued"),
        ("claim", "queued", "running"),
        ("advance", "running", "queued"),
        ("claim", "queued", "running"),
        ("complete", "running", "succeeded"),
    ]
