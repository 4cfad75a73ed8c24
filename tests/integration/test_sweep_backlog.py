"""A sweep works through what is due within one beat interval; what it cannot handle (a default
it cannot check, a row it cannot read) is put off instead of read again at every sweep; a
broker that refuses a default's resume is not asked again for every other one."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import timedelta
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event, select, text, update

from models import endings as ending_store
from models import successors as successor_store
from models.db import get_engine, transaction, utcnow
from models.tables import Interrupt, Run
from tests.integration.test_reaper_backlog import Clock
from tests.services import broker_down
from worker import enqueue_run, get_run
from worker.engine import sweeps
from worker.engine.reaper import reap
from worker.engine.sweeps import SweepReport, sweep_report
from worker.runs import list_events
from worker.testing import TaskRecorder, drain

BATCH = 3


def _waiting(count: int, **run_input: Any) -> list[str]:
    """Runs of the ``expiring`` flow waiting on their interrupt, due an hour from now."""
    runs = [enqueue_run("expiring", dict(run_input)) for _ in range(count)]
    drain()
    assert {get_run(run_id).state for run_id in runs} == {"waiting"}
    return runs


def _later(hours: float = 2) -> Any:
    return utcnow() + timedelta(hours=hours)


def _put_off_until(run_id: str) -> Any:
    with transaction(readonly=True) as session:
        return session.execute(
            select(Interrupt.put_off_until).where(Interrupt.run_id == run_id)
        ).scalar_one()


def test_a_sweep_starts_no_batch_after_one_beat_interval(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three batches due, and a clock past the beat interval once two are done
    runs = _waiting(2 * BATCH + 1)
    monkeypatch.setattr(sweeps, "time", SimpleNamespace(monotonic=Clock(0.0, 0.0).monotonic))
    # When a sweep runs, it stops there; the next one handles the rest
    assert sweep_report(now=_later(), batch=BATCH) == SweepReport(handled=2 * BATCH)
    monkeypatch.undo()
    assert sweep_report(now=_later(), batch=BATCH) == SweepReport(handled=1)
    assert {get_run(run_id).state for run_id in runs} == {"expired"}


def test_a_deferred_row_is_put_off_not_read_at_every_sweep(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a default this process cannot check (its run's flow version is not loaded here),
    # due before a batch of others
    (stuck,) = _waiting(1, policy="default")
    with transaction() as session:
        session.execute(text("UPDATE runs SET flow_version = 99 WHERE id = :id"), {"id": stuck})
    others = _waiting(BATCH)
    caplog.set_level(logging.WARNING, logger="worker")
    # When sweeps run two hours and nearly three hours from now (an hour and nearly two past
    # the deadline)
    first = sweep_report(now=_later(2), batch=BATCH)
    second = sweep_report(now=_later(2.9), batch=BATCH)
    # Then the first defers it, and handles the others (one batch more, not one row short)
    assert first == SweepReport(handled=BATCH, deferred=1)
    assert {get_run(run_id).state for run_id in others} == {"expired"}
    # And puts it off by as long as it had been overdue (an hour), so the second does not read
    # it nor warn again
    assert abs(_put_off_until(stuck) - _later(3)) < timedelta(minutes=2)
    assert second == SweepReport()
    deferrals = [r for r in caplog.records if "deferred" in r.getMessage()]
    assert len(deferrals) == 1
    assert "looked at again at" in deferrals[0].getMessage()
    # And an operator's sweep (bring_forward) looks at it now
    assert sweep_report(now=_later(3), bring_forward=True) == SweepReport(deferred=1)
    assert get_run(stuck).state == "waiting"


def test_a_refused_resume_ends_the_publishing_and_the_reaper_sends_them(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given runs answered by their default while the broker is down
    runs = _waiting(4, policy="default")
    caplog.set_level(logging.WARNING, logger="worker")
    with broker_down() as refused:
        report = sweep_report(now=_later())
    # Then every default was applied, the broker was asked once, and the sweep says so
    assert report == SweepReport(handled=4, not_published=4)
    assert len(refused) == 1
    assert "3 more resume(s) left for the reaper to publish" in [
        r.getMessage() for r in caplog.records
    ]
    assert {get_run(run_id).state for run_id in runs} == {"resuming"}
    # And the reaper publishes them once their dispatch is old enough; the runs finish
    assert reap(now=_later(3)) == 4
    drain()
    assert {get_run(run_id).state for run_id in runs} == {"succeeded"}


@pytest.fixture()
def sqlite_only(backend: str) -> None:
    if backend != "sqlite":
        pytest.skip("only SQLite stores JSON as text that can be broken")


def _break(table: str, column: str, row_id: str) -> None:
    with transaction() as session:
        session.execute(
            text(f"UPDATE {table} SET {column} = '{{bad' WHERE id = :id"), {"id": row_id}
        )


def test_rows_that_cannot_be_read_do_not_stop_the_sweep(
    sqlite_only: None, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given due interrupts, one with broken evidence and one whose run has broken input
    broken_interrupt, broken_run, *fine = _waiting(4)
    with transaction(readonly=True) as session:
        interrupt_id = session.execute(
            select(Interrupt.id).where(Interrupt.run_id == broken_interrupt)
        ).scalar_one()
    _break("interrupts", "evidence", interrupt_id)
    _break("runs", "input", broken_run)
    caplog.set_level(logging.ERROR, logger="worker")
    # When the sweep runs, the others are handled and the two are counted failed, logged,
    # and put off
    assert sweep_report(now=_later()) == SweepReport(handled=2, failed=2)
    assert {get_run(run_id).state for run_id in fine} == {"expired"}
    errors = [r.getMessage() for r in caplog.records]
    assert any(interrupt_id in m and "cannot be read" in m for m in errors), errors
    assert any("its run cannot be read" in m for m in errors), errors
    assert sweep_report(now=_later()) == SweepReport()


def test_a_run_that_cannot_be_read_does_not_stop_the_reaper(
    sqlite_only: None, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two runs whose worker died holding their lease, one with broken input
    runs = [enqueue_run("quick", {}) for _ in range(2)]
    with transaction() as session:
        session.execute(
            update(Run)
            .where(Run.id.in_(runs))
            .values(
                state="running",
                lease_owner="dead",
                lease_epoch=1,
                lease_expires_at=utcnow() - timedelta(minutes=5),
            )
        )
    _break("runs", "input", runs[0])
    caplog.set_level(logging.ERROR, logger="worker")
    # When the reaper passes, the readable one is requeued and the other is logged
    assert reap() == 1
    with transaction(readonly=True) as session:
        assert session.get_one(Run, runs[1]).state == "queued"
    assert any(
        getattr(r, "run_id", None) == runs[0] and "cannot be read" in r.getMessage()
        for r in caplog.records
    )


@pytest.fixture()
def savepoints(db: str) -> Iterator[list[str]]:
    """The SAVEPOINT statements sent while the test runs."""
    seen: list[str] = []

    def record(_conn: object, _cursor: object, statement: str, *_: object) -> None:
        if statement.lstrip().upper().startswith("SAVEPOINT"):
            seen.append(statement)

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


def test_a_batch_that_applies_cleanly_takes_no_savepoint_per_interrupt(
    tasks: TaskRecorder, savepoints: list[str]
) -> None:
    # Given two batches due, with a policy of each kind that writes (a savepoint and its
    # release were two round trips per interrupt, most of a sweep's time: issue 41)
    runs = [
        *_waiting(BATCH, policy="expire"),
        *_waiting(1, policy="cancel"),
        *_waiting(1, policy="escalate"),
    ]
    savepoints.clear()
    # When a sweep runs
    assert sweep_report(now=_later(), batch=BATCH) == SweepReport(handled=BATCH + 2)
    # Then it applied every policy without a savepoint
    assert savepoints == []
    assert sorted(get_run(run_id).state for run_id in runs) == ["cancelled"] + [
        "expired"
    ] * BATCH + ["waiting"]


@pytest.fixture
def ends_written(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The runs of each ``end_runs`` the sweep makes, in order."""
    calls: list[list[str]] = []
    write = ending_store.end_runs

    def recorded(session: Any, endings: Any, *, actor: str) -> None:
        calls.append([ending.run.id for ending in endings])
        write(session, endings, actor=actor)

    monkeypatch.setattr(ending_store, "end_runs", recorded)
    return calls


def test_a_batch_ends_its_runs_in_one_write(
    tasks: TaskRecorder, ends_written: list[list[str]]
) -> None:
    # Given a batch of runs due to expire and to be cancelled, and one to escalate between them
    expiring = _waiting(2, policy="expire")
    escalating = _waiting(1, policy="escalate")
    cancelled = _waiting(1, policy="cancel")
    # When a sweep runs
    assert sweep_report(now=_later(), batch=10) == SweepReport(handled=4)
    # Then the three ends were written together, after the escalation (one statement on
    # PostgreSQL rather than one per run: issue 41's sweep of 1,000 due)
    assert [sorted(runs) for runs in ends_written] == [sorted([*expiring, *cancelled])]
    # And each run ended as a move of its own would have ended it: state, version, lease,
    # error, one event of the system actor, and its interrupt expired
    for run_id, state, trigger in [
        *((r, "expired", "expire") for r in expiring),
        (cancelled[0], "cancelled", "cancel"),
    ]:
        with transaction(readonly=True) as session:
            run = session.get_one(Run, run_id)
            (interrupt,) = session.scalars(select(Interrupt).where(Interrupt.run_id == run_id))
        assert (run.state, run.state_version) == (state, 3)
        assert (run.lease_owner, run.lease_expires_at) == (None, None)
        assert run.finished_at == run.updated_at and run.finished_at is not None
        assert run.error is not None and "'choose' passed its deadline" in run.error
        last = list_events(run_id)[-1]
        assert (last.trigger, last.actor, last.from_state, last.to_state) == (
            trigger,
            sweeps.SYSTEM_ACTOR,
            "waiting",
            state,
        )
        assert last.detail["name"] == "choose" and last.detail["policy"] == trigger
        assert (interrupt.status, interrupt.resolved_by) == ("expired", sweeps.SYSTEM_ACTOR)
        assert interrupt.resolved_at is not None
        assert last.detail["interrupt_id"] == interrupt.id
    assert get_run(escalating[0]).state == "waiting"


def test_a_run_moved_under_a_batch_of_ends_is_handled_alone(
    tasks: TaskRecorder, ends_written: list[list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given three runs due to expire, the second of which moves while the batch is written
    runs = _waiting(3, policy="expire")
    write = ending_store.end_runs

    def raced(session: Any, endings: Any, *, actor: str) -> None:
        if len(endings) > 1:  # (inside the batch's transaction: rolled back with it)
            session.execute(
                text("UPDATE runs SET state_version = state_version + 1 WHERE id = :id"),
                {"id": runs[1]},
            )
        write(session, endings, actor=actor)

    monkeypatch.setattr(ending_store, "end_runs", raced)
    # When a sweep runs
    assert sweep_report(now=_later(), batch=10) == SweepReport(handled=3)
    # Then nothing of the batch's write stayed: it was applied again, each run alone
    for run_id in runs:
        assert get_run(run_id).state == "expired"
        assert [e.trigger for e in list_events(run_id)].count("expire") == 1


def test_a_batch_escalates_its_interrupts_in_one_write_each_successor_whole(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a batch of three interrupts due to escalate
    runs = _waiting(3, policy="escalate")
    written: list[int] = []
    write = successor_store.supersede_all

    def recorded(session: Any, successions: Any, *, actor: str) -> set[str]:
        written.append(len(successions))
        return write(session, successions, actor=actor)

    monkeypatch.setattr(successor_store, "supersede_all", recorded)
    # When a sweep runs
    assert sweep_report(now=_later(), batch=10) == SweepReport(handled=3)
    # Then the three successions were written together
    assert written == [3]
    # And each successor is its old interrupt but for what an escalation changes, column by
    # column as stored (JSON's null stays JSON's null), as a succession written alone leaves it
    changed = {"roles", "deadline", "escalation_level"}
    own = {"id", "status", "supersedes", "created_at"}
    resolution = {"superseded_by", "resolved_by", "resolved_at"}
    same = [c for c in Interrupt.__table__.columns.keys() if c not in changed | own | resolution]  # noqa: SIM118
    old, new = Interrupt.__table__.alias("o"), Interrupt.__table__.alias("n")
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(
                old.c.run_id,
                old.c.status,
                old.c.superseded_by == new.c.id,
                old.c.resolved_by,
                new.c.status,
                new.c.escalation_level - old.c.escalation_level,
                new.c.roles,
                *(old.c[c].is_not_distinct_from(new.c[c]) for c in same),
                *(new.c[c].is_(None) for c in resolution),
            ).select_from(old.join(new, new.c.supersedes == old.c.id))
        ).all()
    assert sorted(row[0] for row in rows) == sorted(runs)
    for row in rows:
        assert tuple(row[1:7]) == (
            "superseded",
            True,
            sweeps.SYSTEM_ACTOR,
            "pending",
            1,
            ["manager"],
        )
        assert all(row[7:]), dict(zip([*same, *resolution], row[7:], strict=True))
