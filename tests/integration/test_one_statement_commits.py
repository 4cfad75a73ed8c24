"""A step's commit is one statement, its own transaction: all of it is written, or none.

The commits of a step (suspend, advance, complete, retry, fail), an effect's intent and an
enqueue run as ``transaction(autocommit=True)``: on PostgreSQL each is one statement that
commits on its own, without ``BEGIN`` and ``COMMIT`` round trips. The rows that ride along with
a transition (events, the checkpoint, effect outcomes) are guarded on its compare-and-set, so a
lost race writes none of them even though no transaction is there to roll back.
"""

from __future__ import annotations

from typing import Any

import pytest
from sqlalchemy import func, select

from models import checkpoints as checkpoint_store
from models import claims as claim_store
from models import events as event_store
from models import runs as store
from models.db import transaction, utcnow
from models.effects import Outcome, outcome_writes
from models.enums import EffectStatus, EventKind
from models.errors import FencedError, StaleStateError
from models.tables import Checkpoint, Effect, Event, Run
from tests.services import statements_sent
from worker import enqueue_run
from worker.testing import TaskRecorder


def _counts(run_id: str) -> tuple[int, int]:
    with transaction(readonly=True) as session:
        events = session.execute(
            select(func.count()).select_from(Event).where(Event.run_id == run_id)
        ).scalar_one()
        checkpoints = session.execute(
            select(func.count()).select_from(Checkpoint).where(Checkpoint.run_id == run_id)
        ).scalar_one()
    return int(events), int(checkpoints)


def _intent(run_id: str, *, epoch: int) -> Effect:
    now = utcnow()
    return Effect(
        run_id=run_id,
        step="a",
        name="charge",
        idempotency_key="k",
        epoch=epoch,
        request_hash="h",
        status=EffectStatus.INTENT.value,
        created_at=now,
        updated_at=now,
    )


def _write_event(session: Any, run_id: str) -> None:
    """One write: an audit event for ``run_id`` (on a session or an autocommit scope)."""
    event_store.record_event(session, run_id, actor="t", kind=EventKind.PAUSE_REQUESTED, detail={})


def _load(run_id: str) -> Run:
    with transaction(readonly=True) as session:
        return store.load_run(session, run_id)


@pytest.mark.parametrize("fenced", [False, True], ids=["stale-version", "stale-epoch"])
def test_a_lost_compare_and_set_writes_none_of_its_rows(
    db: str, tasks: TaskRecorder, fenced: bool
) -> None:
    # Given a run claimed by a worker, and a copy of it as a stale owner saw it
    run_id = enqueue_run("three_steps", {"n": 1})
    with transaction() as session:
        stale = claim_store.claim(session, run_id, owner="w:1", lease_seconds=30)
    assert stale is not None
    with transaction() as session:  # an effect of the step, in intent
        session.add(_intent(run_id, epoch=stale.lease_epoch))
    # (another owner moves the run on: its version, and with ``fenced`` its epoch, change)
    with transaction() as session:
        run = store.load_run(session, run_id)
        store.move(
            session,
            run,
            EventKind.RETRY,
            actor="w:1",
            fence_epoch=run.lease_epoch,
            lease_owner=None,
            lease_expires_at=None,
            **({"lease_epoch": run.lease_epoch + 1} if fenced else {}),
        )
    before = _counts(run_id)
    # When the stale owner commits its step: a checkpoint, events and an outcome ride along
    checkpoint = checkpoint_store.new_checkpoint(
        stale, step="a", next_step="b", state={}, budget_consumed=0.0, effects=[], epoch=1
    )
    outcome = Outcome(key="k", status=EffectStatus.APPLIED, receipt={"ok": True})
    expected = FencedError if fenced else StaleStateError
    with pytest.raises(expected), transaction(autocommit=True) as session:
        store.move_through(
            session,
            stale,
            [(EventKind.ADVANCE, {"step": "a"})],
            actor="w:1",
            fence_epoch=stale.lease_epoch if fenced else None,
            facts=[(EventKind.STEP_REEXECUTED, {"count": 2})],
            writes=[
                checkpoint_store.checkpoint_insert(session, checkpoint),
                *outcome_writes(run_id=run_id, epoch=stale.lease_epoch, outcomes=[outcome]),
            ],
            checkpoint_seq=checkpoint.seq,
        )
    # Then nothing of it was written: no event, no checkpoint, no outcome
    assert _counts(run_id) == before
    with transaction(readonly=True) as session:
        statuses = session.execute(select(Effect.status).where(Effect.run_id == run_id)).all()
    assert [tuple(row) for row in statuses] == [(EffectStatus.INTENT.value,)]


def test_a_won_compare_and_set_writes_all_of_its_rows_in_one_statement(
    db: str, backend: str, tasks: TaskRecorder
) -> None:
    # Given a claimed run
    run_id = enqueue_run("three_steps", {"n": 1})
    with transaction() as session:
        run = claim_store.claim(session, run_id, owner="w:1", lease_seconds=30)
    assert run is not None
    events, checkpoints = _counts(run_id)
    checkpoint = checkpoint_store.new_checkpoint(
        run, step="a", next_step="b", state={"y": 2}, budget_consumed=0.0, effects=[], epoch=1
    )
    # When its step commits as one autocommit transaction
    with statements_sent(db) as statements, transaction(autocommit=True) as session:
        store.move_through(
            session,
            run,
            [(EventKind.ADVANCE, {"step": "a"})],
            actor="w:1",
            fence_epoch=run.lease_epoch,
            facts=[(EventKind.STEP_REEXECUTED, {"count": 2})],
            writes=[checkpoint_store.checkpoint_insert(session, checkpoint)],
            checkpoint_seq=checkpoint.seq,
            next_step="b",
            lease_owner=None,
            lease_expires_at=None,
        )
    # Then the run, its two events and the checkpoint are all there
    assert _counts(run_id) == (events + 2, checkpoints + 1)
    assert _load(run_id).checkpoint_seq == checkpoint.seq
    if backend == "postgresql":
        # ...written by one statement (no BEGIN: SQLAlchemy's own BEGIN is not a statement)
        assert statements == ["WITH"]


def test_a_second_write_in_an_autocommit_transaction_is_refused(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run
    run_id = enqueue_run("three_steps", {"n": 1})
    before = _counts(run_id)
    # When code writes twice in one autocommit transaction, Then the second write raises
    with pytest.raises(RuntimeError, match="second write"), transaction(autocommit=True) as s:
        _write_event(s, run_id)
        _write_event(s, run_id)
    # (the first one, committed on its own on PostgreSQL, or rolled back with SQLite's
    # transaction: never the second)
    assert _counts(run_id)[0] <= before[0] + 1


def _events(run_id: str) -> int:
    return _counts(run_id)[0]


def test_an_autocommit_write_on_postgresql_is_committed_before_its_block_ends(
    db: str, backend: str, tasks: TaskRecorder
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite's autocommit transaction is a plain one, committed at its end")
    # Given a run
    run_id = enqueue_run("three_steps", {"n": 1})
    before = _events(run_id)
    # When one write runs in an autocommit transaction (a bare connection, no ORM session)
    with transaction(autocommit=True) as scope:
        _write_event(scope, run_id)
        # Then another connection sees it at once: the statement committed on its own
        seen = _events(run_id)
        # and the ORM's unit of work is not there to leave changes unwritten
        with pytest.raises(AttributeError):
            scope.add  # type: ignore[union-attr]  # noqa: B018
    assert seen == before + 1


def test_a_transaction_on_a_connection_that_was_in_autocommit_is_atomic(
    db: str, backend: str, tasks: TaskRecorder
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite's autocommit transaction is a plain one: its connection never switches")
    # Given a run, and an autocommit write whose connection went back to the pool
    run_id = enqueue_run("three_steps", {"n": 1})
    before = _events(run_id)
    with transaction(autocommit=True) as scope:
        used = scope.connection().connection.driver_connection
        _write_event(scope, run_id)
    # When a transaction on that same connection writes twice, then fails
    with pytest.raises(ZeroDivisionError), transaction() as session:
        assert session.connection().connection.driver_connection is used  # (the pool is LIFO)
        _write_event(session, run_id)
        _write_event(session, run_id)
        _ = 1 / 0
    # Then neither write is there (only the autocommit one): the connection left autocommit
    # when it was returned
    assert _events(run_id) == before + 1
