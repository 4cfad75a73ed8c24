"""The reaper: expired leases requeued (or failed), lost dispatches republished, once."""

from __future__ import annotations

from datetime import timedelta
from itertools import pairwise
from typing import Any

from sqlalchemy import select, update

from models import claims as claim_store
from models import runs as run_store
from models.db import transaction, utcnow
from models.settings import get_settings
from models.tables import Checkpoint, Event, Run
from tests.flows.effects import applied, calls
from tests.services import broker_down
from worker import (
    ResumeContract,
    add_actor,
    enqueue_run,
    get_run,
    list_interrupts,
    submit_resume,
)
from worker.engine.reaper import REDISPATCH_WAIT_LIMIT, reap, requeue_lost
from worker.engine.tasknames import TASK_RESUME, TASK_STEP
from worker.testing import TaskRecorder


def _set_fields(session: Any, run_id: str, **fields: Any) -> None:
    """Age a run's lease or dispatch as time would (test set-up, not a lifecycle write)."""
    session.execute(update(Run).where(Run.id == run_id).values(**fields))


def _queued(flow: str = "quick", first_step: str = "only", input: Any = None) -> str:
    """A run committed as queued whose task was never published (a lost publish)."""
    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name=flow,
            flow_version=1,
            input=input or {},
            first_step=first_step,
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        return run.id


def _claimed_by_dead_worker(lost_leases: int = 0) -> str:
    """A run claimed by a worker that died: running, lease already expired."""
    run_id = _queued()
    with transaction() as session:
        assert claim_store.claim(session, run_id, owner="dead-worker", lease_seconds=0.01)
        _set_fields(
            session,
            run_id,
            lost_leases=lost_leases,
            lease_expires_at=utcnow() - timedelta(seconds=1),
        )
    return run_id


def _events(run_id: str, trigger: str) -> list[Event]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event)
                .where(Event.run_id == run_id, Event.trigger == trigger)
                .order_by(Event.id)
            ).scalars()
        )


def _run_row(run_id: str) -> Run:
    with transaction(readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def test_expired_lease_is_requeued_and_the_run_finishes(tasks: TaskRecorder) -> None:
    # Given a run whose worker died holding its lease
    run_id = _claimed_by_dead_worker()
    # When the reaper runs
    assert reap() == 1
    # Then the run was requeued by the reaper, counted as a lost lease, and republished
    [requeue] = _events(run_id, "requeue")
    assert (requeue.actor, requeue.from_state, requeue.to_state) == (
        "system:reaper",
        "running",
        "queued",
    )
    assert requeue.detail["owner"] == "dead-worker"
    assert requeue.detail["lost_leases"] == 1
    assert [(t.name, t.run_id) for t in tasks.pending] == [(TASK_STEP, run_id)]
    tasks.drain()
    assert get_run(run_id).state == "succeeded"
    claims = _events(run_id, "claim")
    assert [c.detail["epoch"] for c in claims] == [1, 2]
    assert claims[1].actor != "worker:dead-worker"
    # A finished run is nothing for the reaper
    assert reap() == 0


def test_lease_lost_too_many_times_fails_the_run(db: str) -> None:
    limit = get_settings().max_claims
    run_id = _claimed_by_dead_worker(lost_leases=limit)
    assert reap() == 1
    row = _run_row(run_id)
    assert row.state == "failed"
    assert row.error is not None and row.error.startswith(f"lease lost {limit + 1} times")
    assert row.lease_owner is None
    [fail] = _events(run_id, "fail")
    assert fail.actor == "system:reaper"
    assert reap() == 0


def test_live_lease_is_left_alone(db: str) -> None:
    run_id = _queued()
    with transaction() as session:
        assert claim_store.claim(session, run_id, owner="busy-worker", lease_seconds=60)
    assert reap() == 0
    assert _run_row(run_id).state == "running"


def _age_dispatch(run_id: str) -> None:
    """Make the run's last dispatch older than the reaper's threshold."""
    overdue = utcnow() - timedelta(seconds=get_settings().redispatch_after + 1)
    with transaction() as session:
        _set_fields(session, run_id, dispatched_at=overdue)


def test_lost_publish_is_republished_once_and_the_run_finishes(tasks: TaskRecorder) -> None:
    # Given a queued run whose task was lost after commit
    run_id = _queued()
    # Nothing is republished before the threshold
    assert reap() == 0
    assert tasks.pending == []
    # When the reaper runs once the dispatch is overdue, it republishes once
    _age_dispatch(run_id)
    assert reap() == 1
    assert _run_row(run_id).dispatched_at > utcnow() - timedelta(seconds=5)
    assert reap() == 0
    assert [(t.name, t.run_id) for t in tasks.pending] == [(TASK_STEP, run_id)]
    # Then the run is claimed and finishes
    tasks.drain()
    assert get_run(run_id).state == "succeeded"


def test_a_run_left_unclaimed_is_republished_after_waits_that_double(tasks: TaskRecorder) -> None:
    # Given a queued run that no worker claims for twenty minutes (a backlog, or no worker),
    # its last transition and its dispatch at start
    start = utcnow() - timedelta(hours=2)
    run_id = _queued()
    with transaction() as session:
        _set_fields(session, run_id, updated_at=start, dispatched_at=start)
    first = get_settings().redispatch_after
    limit = first * REDISPATCH_WAIT_LIMIT
    interval = 10  # seconds between reaper passes, as beat runs them by default
    # When the reaper passes every ten seconds (a quarter second off the waits' exact ends,
    # where SQLite's arithmetic on timestamps may round either way)
    passes = [k * interval + 0.25 for k in range(1200 // interval)]
    republished = [t for t in passes if reap(now=start + timedelta(seconds=t))]
    # Then the first republish comes at the first pass after INTERLUDE_REDISPATCH_AFTER, as a
    # lost message needs
    assert republished[0] == first + 0.25
    # And each later wait lasts as long as the run had gone unclaimed then (up to the limit),
    # to the first pass after it: the waits double
    for before, after in pairwise(republished):
        wait = min(before, limit)
        assert wait <= after - before <= wait + interval, republished
    # So the run is published 11 times in twenty minutes, not 30 (once every pass past
    # INTERLUDE_REDISPATCH_AFTER)
    assert len(republished) == 11, republished
    assert len(tasks.pending) == len(republished)
    assert len(_events(run_id, "republish")) == len(republished)
    # And it still runs once a worker takes it
    tasks.drain()
    assert get_run(run_id).state == "succeeded"


def test_a_republish_the_broker_refused_is_tried_again_at_the_next_pass(
    tasks: TaskRecorder,
) -> None:
    # Given a run unclaimed for ten minutes, republished a minute ago (its next wait: ten)
    now = utcnow()
    run_id = _queued()
    with transaction() as session:
        _set_fields(
            session,
            run_id,
            updated_at=now - timedelta(minutes=10),
            dispatched_at=now - timedelta(minutes=1),
        )
    assert reap(now=now) == 0

    # When the reaper's next republish of it fails (the broker is down)
    later = now + timedelta(minutes=10)
    with broker_down():
        assert reap(now=later) == 1
    assert tasks.pending == []
    # Then the failed publish does not count as one: the next pass sends it, once
    next_pass = later + timedelta(seconds=10)
    assert reap(now=next_pass) == 1
    assert reap(now=next_pass + timedelta(seconds=10)) == 0
    assert [(t.name, t.run_id) for t in tasks.pending] == [(TASK_STEP, run_id)]
    assert _run_row(run_id).dispatched_at == next_pass


def test_run_waiting_for_its_retry_backoff_is_not_republished(db: str) -> None:
    run_id = _queued()
    far = utcnow() + timedelta(hours=1)
    with transaction() as session:
        _set_fields(session, run_id, not_before=far, dispatched_at=utcnow() - timedelta(hours=1))
    assert reap() == 0
    assert reap(now=far + timedelta(seconds=1)) == 1


def test_resume_lost_between_acceptance_and_dispatch_continues_once(tasks: TaskRecorder) -> None:
    credential = add_actor("approver-2", ["approver"])
    # Given a run waiting for approval after its effect
    run_id = enqueue_run("effect_then_interrupt", {})
    tasks.drain()
    [interrupt] = list_interrupts(run_id=run_id, status="pending")
    # When the resume is accepted but its task is lost after the commit
    result = submit_resume(
        ResumeContract.for_interrupt(
            interrupt, actor="approver-2", decision="approved", input={"go": True}
        ),
        credential,
    )
    assert result.outcome == "accepted"
    assert [t.name for t in tasks.clear()] == [TASK_RESUME]
    # Then the run sits in resuming with nobody to claim it
    assert get_run(run_id).state == "resuming"
    assert len(_events(run_id, "claim")) == 1
    # And the reaper, once the dispatch is overdue, republishes it to the resume queue
    _age_dispatch(run_id)
    assert reap() == 1
    assert reap() == 0
    assert [(t.name, t.run_id) for t in tasks.pending] == [(TASK_RESUME, run_id)]
    tasks.drain()
    assert get_run(run_id).state == "succeeded"
    # And the run continued exactly once: one claim after acceptance, one more checkpoint,
    # its effect still applied once
    run = get_run(run_id)
    assert run.output["decision"] == "approved"
    claims = _events(run_id, "claim")
    assert [(c.from_state, c.detail["epoch"]) for c in claims] == [("queued", 1), ("resuming", 2)]
    with transaction(readonly=True) as session:
        seqs = list(
            session.execute(
                select(Checkpoint.seq).where(Checkpoint.run_id == run_id).order_by(Checkpoint.seq)
            ).scalars()
        )
    assert seqs == [0, 1]
    assert (calls(run_id), applied(run_id)) == (1, 1)


def test_a_run_whose_owner_died_is_requeued_only_for_that_owner(tasks: TaskRecorder) -> None:
    # Given a run held by a live lease of "host:41"
    run_id = _queued()
    with transaction() as session:
        assert claim_store.claim(session, run_id, owner="host:41", lease_seconds=300)
    # When another owner is said to have died, nothing moves: a live lease is never cut short
    assert not requeue_lost(run_id, "host:42")
    assert get_run(run_id).state == "running"
    # When its own owner died, the run is queued again at once, counted as a lost lease, and
    # the requeue names the lease it had (from which an effect's grace counts)
    assert requeue_lost(run_id, "host:41")
    run = _run_row(run_id)
    assert (run.state, run.lease_owner, run.lost_leases) == ("queued", None, 1)
    (event,) = _events(run_id, "requeue")
    assert (event.detail["owner"], event.detail["note"]) == ("host:41", "its process died")
    assert event.detail["lease_expires_at"] is not None
    # And saying so again changes nothing
    assert not requeue_lost(run_id, "host:41")
