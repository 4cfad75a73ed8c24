"""The retention store: the only code that deletes rows. ``purge`` removes runs that finished
(succeeded, failed, cancelled, expired) before a cutoff, with everything recorded for them.

A run is taken only while it is still terminal and finished before the cutoff, and it is
locked with what is deleted for it (on PostgreSQL; SQLite's writer lock covers the
transaction): a run retried meanwhile is not terminal any more and stays.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import ColumnElement, Table, delete, func, or_, select
from sqlalchemy.orm import Session

from models.db import dialect
from models.tables import Checkpoint, Effect, Event, Interrupt, KeptEvent, ResumeAttempt, Run
from statemachine import TERMINAL_STATES

TERMINAL = sorted(state.value for state in TERMINAL_STATES)
# Children first: what refers to a run goes before the run.
PURGED_TABLES = (
    "resume_attempts",
    "effects",
    "kept_events",
    "events",
    "checkpoints",
    "interrupts",
    "runs",
)


def _table(model: Any) -> Table:
    table: Table = model.__table__
    return table


def _finished_before(cutoff: datetime) -> ColumnElement[bool]:
    return Run.state.in_(TERMINAL) & (Run.finished_at < cutoff)


def _attempts_of(run_ids: Any) -> ColumnElement[bool]:
    """Attempts recorded for these runs: naming one of them, or one of their interrupts."""
    their_interrupts = select(Interrupt.id).where(Interrupt.run_id.in_(run_ids))
    return or_(ResumeAttempt.run_id.in_(run_ids), ResumeAttempt.interrupt_id.in_(their_interrupts))


def count_purgeable(session: Session, cutoff: datetime) -> dict[str, int]:
    """How many rows of each table ``purge`` would delete for runs finished before ``cutoff``."""
    runs = select(Run.id).where(_finished_before(cutoff))
    counted = {
        "resume_attempts": select(func.count()).where(_attempts_of(runs)),
        "effects": select(func.count()).where(Effect.run_id.in_(runs)),
        "kept_events": select(func.count()).where(KeptEvent.run_id.in_(runs)),
        "events": select(func.count()).where(Event.run_id.in_(runs)),
        "checkpoints": select(func.count()).where(Checkpoint.run_id.in_(runs)),
        "interrupts": select(func.count()).where(Interrupt.run_id.in_(runs)),
        "runs": select(func.count()).where(_finished_before(cutoff)),
    }
    return {name: int(session.execute(query).scalar_one()) for name, query in counted.items()}


def purge_finished_runs(session: Session, cutoff: datetime, *, limit: int) -> dict[str, int]:
    """Delete up to ``limit`` runs finished before ``cutoff`` and everything recorded for
    them, in this transaction; returns the rows deleted per table (all zero: none was left)."""
    query = select(Run.id).where(_finished_before(cutoff)).order_by(Run.id).limit(limit)
    run_ids: Sequence[str] = list(session.execute(dialect(session).lock(query)).scalars())
    deleted = dict.fromkeys(PURGED_TABLES, 0)
    if not run_ids:
        return deleted
    statements = {
        "resume_attempts": delete(_table(ResumeAttempt)).where(_attempts_of(run_ids)),
        "effects": delete(_table(Effect)).where(Effect.run_id.in_(run_ids)),
        "kept_events": delete(_table(KeptEvent)).where(KeptEvent.run_id.in_(run_ids)),
        "events": delete(_table(Event)).where(Event.run_id.in_(run_ids)),
        "checkpoints": delete(_table(Checkpoint)).where(Checkpoint.run_id.in_(run_ids)),
        "interrupts": delete(_table(Interrupt)).where(Interrupt.run_id.in_(run_ids)),
        "runs": delete(_table(Run)).where(Run.id.in_(run_ids)),
    }
    for name in PURGED_TABLES:
        result = session.execute(statements[name])
        deleted[name] = int(result.rowcount)  # type: ignore[attr-defined]
    return deleted
