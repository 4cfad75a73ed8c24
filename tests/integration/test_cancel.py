"""Cancelling runs: waiting, in flight, queued, and finished (which must change nothing)."""

from __future__ import annotations

import os
import threading
import uuid
from datetime import timedelta

import pytest
import redis

from models import runs as run_store
from models.db import transaction, utcnow
from models.errors import InvalidInputError, InvalidTransitionError, RunNotFoundError
from tests.services import wait_for
from worker import add_actor, cancel_run, enqueue_run, get_interrupt, get_run, submit_resume
from worker.engine.runtime import execute
from worker.engine.sweeps import sweep_expired
from worker.interrupts import list_interrupts, list_resume_attempts
from worker.runs import list_checkpoints, list_effects, list_events
from worker.testing import TaskRecorder


def _redis() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])


def _carol() -> str:
    """An operator's credential (the test flows keep the default operator role)."""
    return add_actor("carol", ["operator"])


def test_cancel_closes_pending_interrupts(tasks: TaskRecorder) -> None:
    # Given a run waiting on an approval
    credential = add_actor("alice", ["approver"])
    carol = _carol()
    run_id = enqueue_run("expiring", {"policy": "expire", "expires_in": 3600})
    tasks.drain()
    assert get_run(run_id).state == "waiting"
    (interrupt,) = get_run(run_id).pending_interrupts
    # When an operator cancels it
    by = cancel_run(run_id, actor="Carol", credential=carol, reason="customer withdrew")
    # Then the run is cancelled and its interrupt closed by the operator
    run = get_run(run_id)
    assert (run.state, run.error, run.pending_interrupts) == (
        "cancelled",
        "customer withdrew",
        [],
    )
    # recorded as the authenticated actor, in the normal form of its id
    assert by == "human:carol"
    closed = get_interrupt(interrupt.id)
    assert (closed.status, closed.resolved_by) == ("cancelled", "human:carol")
    last = list_events(run_id)[-1]
    assert (last.trigger, last.actor, last.from_state, last.to_state) == (
        "cancel",
        "human:carol",
        "waiting",
        "cancelled",
    )
    assert last.detail == {"reason": "customer withdrew"}
    # And a resume of the closed interrupt is refused as stale and recorded
    contract = {
        "schema_version": "resume.v1",
        "run_id": run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": "human", "id": "alice"},
        "decision": "approved",
        "input": {"choice": "too late"},
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "idempotency_key": uuid.uuid4().hex,
        "expires_at": (utcnow() + timedelta(minutes=5)).isoformat(),
    }
    result = submit_resume(contract, credential)
    assert result.outcome == "stale" and "interrupt is cancelled" in result.reason
    assert [a.outcome for a in list_resume_attempts(interrupt_id=interrupt.id)] == ["stale"]
    # And the sweep has nothing left to do with it
    assert sweep_expired(now=utcnow() + timedelta(days=2)) == 0


@pytest.mark.parametrize("with_effect", [False, True], ids=["commit", "effect"])
def test_a_step_in_flight_when_cancelled_cannot_commit(
    tasks: TaskRecorder, with_effect: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a step that is running (in another thread) and holding its lease
    r = _redis()
    carol = _carol()
    run_id = enqueue_run("held", {"effect": with_effect})
    executing = threading.Thread(target=tasks.drain, name="drain")
    executing.start()
    try:
        wait_for(lambda: r.exists(f"held:started:{run_id}"), timeout=30)
        assert get_run(run_id).state == "running"
        # When the run is cancelled and the step then carries on
        cancel_run(run_id, actor="carol", credential=carol, reason="stop")
    finally:
        r.set(f"held:release:{run_id}", 1)
        executing.join()
    # Then the worker discards what the step produced
    assert any(
        "step result discarded" in record.getMessage() and run_id in record.getMessage()
        for record in caplog.records
    )
    run = get_run(run_id)
    assert (run.state, run.output, run.flow_state) == ("cancelled", None, {})
    assert [c.seq for c in list_checkpoints(run_id)] == [0]
    # And the effect it tried after the cancel was never called nor recorded
    assert r.get(f"held:charged:{run_id}") is None
    assert list_effects(run_id) == []
    transitions = [(e.trigger, e.to_state) for e in list_events(run_id) if e.to_state]
    assert transitions == [("enqueue", "queued"), ("claim", "running"), ("cancel", "cancelled")]


def test_a_cancelled_queued_run_is_never_claimed(db: str) -> None:
    # Given a queued run whose task has not been picked up yet
    with transaction() as session:
        run_id = run_store.insert_run(
            session,
            flow_name="quick",
            flow_version=1,
            input={},
            first_step="only",
            idempotency_key=None,
            started_by="app",
            budget=None,
        ).id
    cancel_run(run_id, actor="carol", credential=_carol())
    # When its task is delivered after all
    execute(run_id)
    # Then nothing runs
    run = get_run(run_id)
    assert (run.state, run.error) == ("cancelled", None)
    assert [e.trigger for e in list_events(run_id)] == ["enqueue", "cancel"]


def test_cancelling_a_finished_run_is_a_one_line_error_that_changes_nothing(
    tasks: TaskRecorder,
) -> None:
    carol = _carol()
    run_id = enqueue_run("quick")
    tasks.drain()
    assert get_run(run_id).state == "succeeded"
    before, events = get_run(run_id), list_events(run_id)
    with pytest.raises(InvalidTransitionError) as error:
        cancel_run(run_id, actor="carol", credential=carol, reason="too late")
    assert str(error.value) == f"run {run_id}: cannot cancel from succeeded"
    with pytest.raises(InvalidInputError, match="cancel needs the acting actor"):
        cancel_run(run_id, actor="", credential=carol)
    with pytest.raises(RunNotFoundError, match="no run nope"):
        cancel_run("nope", actor="carol", credential=carol)
    assert get_run(run_id) == before
    assert list_events(run_id) == events


def test_cancelling_twice_is_refused_the_second_time(tasks: TaskRecorder) -> None:
    carol, dave = _carol(), add_actor("dave", ["operator"])
    run_id = enqueue_run("expiring", {"policy": "expire", "expires_in": 3600})
    tasks.drain()
    assert get_run(run_id).state == "waiting"
    cancel_run(run_id, actor="carol", credential=carol)
    with pytest.raises(InvalidTransitionError, match="cannot cancel from cancelled"):
        cancel_run(run_id, actor="dave", credential=dave)
    assert [e.actor for e in list_events(run_id) if e.trigger == "cancel"] == ["human:carol"]


def test_cancels_racing_a_sweep_end_each_run_one_way(tasks: TaskRecorder) -> None:
    # Given twenty waiting runs whose deadline the sweep will consider passed
    carol = _carol()
    runs = [enqueue_run("expiring", {"policy": "expire", "expires_in": 60}) for _ in range(20)]
    tasks.drain()
    assert all(get_run(r).state == "waiting" for r in runs)
    later = utcnow() + timedelta(hours=1)
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def cancel_all() -> None:
        start.wait()
        # Oldest first, as the sweep goes: the two meet on the same rows again and again.
        for run_id in runs:
            try:
                cancel_run(run_id, actor="carol", credential=carol)
                outcomes[run_id] = "cancelled"
            except InvalidTransitionError:
                outcomes[run_id] = "refused"
            except Exception as exc:  # a deadlock or anything else is a failure of the test
                outcomes[run_id] = repr(exc)

    def sweep() -> None:
        start.wait()
        sweep_expired(now=later, batch=1)

    # When an operator cancels them while the sweep expires them
    threads = [threading.Thread(target=cancel_all), threading.Thread(target=sweep)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Then every run ended exactly one way, and nobody hit a deadlock
    for run_id in runs:
        run = get_run(run_id)
        closers = [(e.trigger, e.actor) for e in list_events(run_id) if e.to_state == run.state]
        (interrupt,) = list_interrupts(run_id=run_id)
        if outcomes[run_id] == "cancelled":
            assert run.state == "cancelled" and closers == [("cancel", "human:carol")]
            assert (interrupt.status, interrupt.resolved_by) == ("cancelled", "human:carol")
        else:
            assert outcomes[run_id] == "refused"
            assert run.state == "expired" and closers == [("expire", "system:expiry")]
            assert (interrupt.status, interrupt.resolved_by) == ("expired", "system:expiry")
