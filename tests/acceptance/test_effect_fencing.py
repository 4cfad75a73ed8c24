"""The effect ledger when the worker executing an effect is killed or frozen: real processes.

Killed inside the effect's call (the outcome is unknown), or frozen (SIGSTOP) past its lease
while a second owner finishes the run: the stale owner's writes are fenced.
"""

from __future__ import annotations

import os
import signal
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from models.db import transaction, utcnow
from models.settings import get_settings
from models.tables import Checkpoint, Event, Run
from tests.flows.effects import applied, calls, outside
from tests.integration.test_effects import (
    _counter,
    _crashed_mid_effect,
    _finished,
    _resolve,
    _state,
)
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_interrupts
from worker.engine.reaper import reap
from worker.runs import list_effects


def test_an_operator_finding_answers_only_for_the_intent_it_was_given_on(
    db: str, shared_worker: WorkerProcess
) -> None:
    operator = add_actor("operator-2", ["operator"])
    # Given a repair settled as "not applied", after which the effect is called again and
    # its worker dies inside the call (outcome unknown once more)
    run_id = _crashed_mid_effect({"verdict": "unknown", "crash_in_fn": True})
    wait_for(lambda: _state(run_id) == "waiting", timeout=30)
    [first] = list_interrupts(run_id=run_id, status="pending")
    assert first.evidence["intent_epoch"] == 1
    assert _resolve(first, operator, "operator-2", "approved", {"outcome": "not_applied"}).accepted
    wait_for(lambda: outside().exists(f"crashed:{run_id}:in_fn"), timeout=30)
    # When the dead worker's lease is reaped
    lease = get_settings().lease_seconds
    wait_for(lambda: reap(now=utcnow() + timedelta(seconds=lease + 1)) >= 1, timeout=30)
    # Then the old finding is not reused: a new repair asks about the new intent
    wait_for(lambda: list_interrupts(run_id=run_id, status="pending"), timeout=30)
    [second] = list_interrupts(run_id=run_id, status="pending")
    assert (second.name, second.evidence["intent_epoch"]) == ("repair:charge", 3)
    assert calls(run_id) == 0
    assert _resolve(second, operator, "operator-2", "approved", {"outcome": "not_applied"}).accepted
    wait_for(lambda: _finished(run_id), timeout=30)
    assert _state(run_id) == "succeeded"
    assert (calls(run_id), applied(run_id)) == (1, 1)
    assert _counter(run_id, "repair_raised") == 2


def _epochs_written(run_id: str) -> tuple[set[int], list[str]]:
    with transaction(readonly=True) as session:
        epochs = set(
            session.execute(
                select(Checkpoint.epoch).where(Checkpoint.run_id == run_id, Checkpoint.seq > 0)
            ).scalars()
        )
        actors = list(
            session.execute(
                select(Event.actor).where(
                    Event.run_id == run_id, Event.trigger.in_(["complete", "advance", "fail"])
                )
            ).scalars()
        )
    return epochs, actors


def _claims(run_id: str) -> list[dict[str, Any]]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event.detail)
                .where(Event.run_id == run_id, Event.trigger == "claim")
                .order_by(Event.id)
            ).scalars()
        )


def _take_over(run_id: str) -> None:
    """Wait for the first owner's lease to expire, then let the reaper hand the run on."""

    def expired() -> bool:
        with transaction(readonly=True) as session:
            run = session.get(Run, run_id)
            assert run is not None
            return bool(
                run.state == "running"
                and run.lease_expires_at is not None
                and run.lease_expires_at < utcnow()
            )

    wait_for(expired, timeout=30)
    assert reap() >= 1


@pytest.mark.parametrize("stall", ["effect", "commit"])
def test_late_writer_is_fenced_and_nothing_it_wrote_is_visible(
    db: str, shared_worker: WorkerProcess, stall: str
) -> None:
    # Given a step whose first execution stalls (inside its effect, or before its commit),
    # its process frozen past its two-second lease so that it cannot renew it
    run_id = enqueue_run("late_writer", {"stall": stall})
    pid = int(wait_for(lambda: outside().get(f"stalled:{run_id}"), timeout=30))
    os.kill(pid, signal.SIGSTOP)
    try:
        # When the reaper takes the run over and a second execution finishes it
        _take_over(run_id)
        wait_for(lambda: _finished(run_id), timeout=30)
        run = get_run(run_id)
        assert run.state == "succeeded", run.error
        assert [c["epoch"] for c in _claims(run_id)] == [1, 2]
    finally:
        # ...and only then the stale first execution carries on
        outside().set(f"release:{run_id}", 1)
        os.kill(pid, signal.SIGCONT)
    if stall == "commit":
        wait_for(lambda: outside().get(f"returned:{run_id}"), timeout=30)
    # Then its commit (with the effect's outcome, which goes with it) is refused with a typed
    # error
    wait_for(
        lambda: f"run {run_id}: lease epoch 1 was superseded" in shared_worker.output(),
        timeout=30,
    )
    # And nothing the stale execution wrote is visible: one checkpoint and one transition,
    # both by the new owner, and the ledger holds no outcome from the stale owner
    run = get_run(run_id)
    assert run.checkpoints == 2
    assert run.output["epoch"] == 2
    epochs, actors = _epochs_written(run_id)
    assert epochs == {2}
    assert len(actors) == 1
    [effect] = list_effects(run_id)
    # (the stale owner's outcome would have gone with its commit: the new owner settled it)
    assert (effect.status, effect.epoch) == ("applied", 2)
    assert outside().get(f"fenced:{run_id}") is None
    assert "late" not in effect.receipt
    assert effect.receipt == run.output["receipt"]
    # The outside world saw the effect once (the second owner reconciled or skipped it)
    assert applied(run_id) == 1
    with transaction(readonly=True) as session:
        total = session.execute(
            select(func.count()).select_from(Checkpoint).where(Checkpoint.run_id == run_id)
        ).scalar_one()
    assert total == 2
