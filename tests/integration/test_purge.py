"""Purging finished runs (issue 11 D): runs that finished before the cutoff go with everything
recorded for them, counted first; unfinished runs, later runs and unrelated attempts stay."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, or_, select, update

from models import mailbox, retention
from models.db import transaction, utcnow
from models.errors import InvalidInputError
from models.tables import Checkpoint, Effect, Event, Interrupt, KeptEvent, ResumeAttempt, Run
from tests.resumes import contract_for, drain_finished, drain_pending
from worker import add_actor, cancel_run, enqueue_run, submit_resume
from worker.ops.retention import purge_finished_runs
from worker.testing import TaskRecorder

TABLES: dict[str, Any] = {
    "resume_attempts": ResumeAttempt,
    "effects": Effect,
    "kept_events": KeptEvent,
    "events": Event,
    "checkpoints": Checkpoint,
    "interrupts": Interrupt,
}


def rows_of(run_id: str) -> dict[str, int]:
    """How many rows each table holds for one run."""
    with transaction(readonly=True) as session:
        counted = {"runs": int(session.get(Run, run_id) is not None)}
        for name, model in TABLES.items():
            if model is ResumeAttempt:
                interrupts = select(Interrupt.id).where(Interrupt.run_id == run_id)
                where = or_(model.run_id == run_id, model.interrupt_id.in_(interrupts))
            else:
                where = model.run_id == run_id
            counted[name] = int(session.execute(select(func.count()).where(where)).scalar_one())
        return counted


def finished_ago(run_id: str, days: float) -> None:
    with transaction() as session:
        session.execute(
            update(Run).where(Run.id == run_id).values(finished_at=utcnow() - timedelta(days=days))
        )


def _sum(*counts: dict[str, int]) -> dict[str, int]:
    return {name: sum(c[name] for c in counts) for name in retention.PURGED_TABLES}


@pytest.fixture()
def runs(db: str, tasks: TaskRecorder, scratch: None) -> dict[str, str]:
    """Runs of every kind: two old finished ones with all their records, a recent finished
    one, one still waiting, one failed long ago but retried since."""
    credential = add_actor("alice", ["approver"])
    # An old run with an effect, an interrupt, a refused and an accepted attempt
    old = enqueue_run("effect_then_interrupt", {})
    interrupt = drain_pending(old)
    refused = contract_for(interrupt, "alice", decision="maybe")
    assert submit_resume(refused, credential).outcome == "malformed"
    assert submit_resume(contract_for(interrupt, "alice"), credential).accepted
    assert drain_finished(old) == "succeeded"
    # An old run cancelled while it waited
    cancelled = enqueue_run("approval", {"env": "qa"})
    drain_pending(cancelled)
    ops = add_actor("ops", ["operator"])
    cancel_run(cancelled, actor="ops", credential=ops, reason="not needed")
    # A run that finished just now, and one that waits
    recent = enqueue_run("effect_then_interrupt", {})
    recent_interrupt = drain_pending(recent)
    assert submit_resume(contract_for(recent_interrupt, "alice"), credential).accepted
    assert drain_finished(recent) == "succeeded"
    waiting = enqueue_run("approval", {"env": "prod"})
    drain_pending(waiting)
    # Each kept an event its step never asked for
    with transaction() as session:
        for run_id in (old, recent):
            mailbox.keep(
                session,
                run_id=run_id,
                name="late",
                payload={},
                sender="bank",
                sender_kind="service",
            )
    for run_id in (old, cancelled):
        finished_ago(run_id, days=10)
    # A malformed attempt that names no run belongs to no run
    assert submit_resume({"schema_version": "resume.v1"}, "ilc_nobody").outcome == "malformed"
    return {"old": old, "cancelled": cancelled, "recent": recent, "waiting": waiting}


def test_a_dry_run_counts_what_a_purge_deletes_and_deletes_nothing(runs: dict[str, str]) -> None:
    # Given the rows each run holds
    before = {name: rows_of(run_id) for name, run_id in runs.items()}
    assert all(before["old"][table] for table in retention.PURGED_TABLES), before["old"]
    cutoff = utcnow() - timedelta(days=5)

    # When a dry run counts runs finished before five days ago
    report = purge_finished_runs(cutoff)

    # Then it counts exactly the two old runs' rows, and nothing changed
    assert report.dry_run and report.batches == 0
    assert report.rows == _sum(before["old"], before["cancelled"])
    assert {name: rows_of(run_id) for name, run_id in runs.items()} == before


def test_a_purge_deletes_old_finished_runs_and_everything_recorded_for_them(
    runs: dict[str, str],
) -> None:
    before = {name: rows_of(run_id) for name, run_id in runs.items()}
    cutoff = utcnow() - timedelta(days=5)
    counted = purge_finished_runs(cutoff).rows

    # When the purge runs, one run per transaction
    report = purge_finished_runs(cutoff, dry_run=False, batch=1)

    # Then it deleted what the dry run counted, in two batches
    assert not report.dry_run and report.batches == 2
    assert report.rows == counted
    # And nothing is left of the old runs, while the others are untouched
    for name in ("old", "cancelled"):
        assert rows_of(runs[name]) == dict.fromkeys(before[name], 0)
    for name in ("recent", "waiting"):
        assert rows_of(runs[name]) == before[name]
    # And the attempt that named no run stays
    with transaction(readonly=True) as session:
        orphans = select(func.count()).where(ResumeAttempt.run_id.is_(None))
        assert session.execute(orphans).scalar_one() == 1
    # And a second purge finds nothing more
    again = purge_finished_runs(cutoff, dry_run=False)
    assert again.batches == 0 and not any(again.rows.values())


def test_the_store_takes_at_most_a_batch_and_only_terminal_runs(runs: dict[str, str]) -> None:
    # Given every run finished (or started) long ago, the waiting one included
    for run_id in runs.values():
        finished_ago(run_id, days=10)
    cutoff = utcnow() - timedelta(days=5)

    # When the store purges one batch of one run, then everything
    with transaction() as session:
        first = retention.purge_finished_runs(session, cutoff, limit=1)
    with transaction() as session:
        rest = retention.purge_finished_runs(session, cutoff, limit=100)

    # Then the first batch took one run, the rest the other finished ones; the waiting run
    # has a finished_at but is not terminal, so it stays
    assert first["runs"] == 1 and rest["runs"] == 2
    assert rows_of(runs["waiting"])["runs"] == 1


def test_a_cutoff_must_be_aware(db: str) -> None:
    with pytest.raises(InvalidInputError, match="aware"):
        purge_finished_runs(utcnow().replace(tzinfo=None))
