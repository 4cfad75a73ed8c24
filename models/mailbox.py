"""The mailbox store: events kept for runs that do not wait on them yet.

An event a run does not wait on yet is kept here, bounded per run, until the run asks for
it; it is consumed once, by the answer it becomes (``consume`` is a compare-and-set on
``consumed_at``, in the transaction that accepts the answer).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, func, select, update
from sqlalchemy.orm import Session

from models.db import dialect, utcnow
from models.redaction import redacted
from models.tables import KeptEvent

KEPT: Table = KeptEvent.__table__  # type: ignore[assignment]


def keep(
    session: Session, *, run_id: str, name: str, payload: Any, sender: str, sender_kind: str
) -> KeptEvent:
    kept = KeptEvent(
        run_id=run_id,
        name=name,
        payload=redacted(payload),
        sender=sender,
        sender_kind=sender_kind,
        arrived_at=utcnow(),
    )
    session.add(kept)
    session.flush()
    return kept


def count_kept(session: Session, run_id: str) -> int:
    """How many events the run's mailbox holds, not yet consumed."""
    query = select(func.count()).where(KEPT.c.run_id == run_id, KEPT.c.consumed_at.is_(None))
    return int(session.execute(query).scalar_one())


def oldest_kept(session: Session, run_id: str, name: str) -> KeptEvent | None:
    """The oldest event ``name`` kept for the run, locked (another delivery skips it)."""
    query = (
        select(KeptEvent)
        .where(
            KeptEvent.run_id == run_id,
            KeptEvent.name == name,
            KeptEvent.consumed_at.is_(None),
        )
        .order_by(KeptEvent.arrived_at, KeptEvent.id)
        .limit(1)
    )
    return session.execute(dialect(session).lock_or_skip(query)).scalars().first()


def consume(session: Session, kept_id: int, interrupt_id: str, at: datetime | None = None) -> bool:
    """Mark the event consumed by the answer to ``interrupt_id``; False if it was already."""
    done = session.execute(
        update(KEPT)
        .where(KEPT.c.id == kept_id, KEPT.c.consumed_at.is_(None))
        .values(consumed_at=at or utcnow(), interrupt_id=interrupt_id)
        .returning(KEPT.c.id)
    ).all()
    return len(done) == 1


def kept_of_run(session: Session, run_id: str) -> list[KeptEvent]:
    """The run's mailbox: events kept and not consumed yet, oldest first."""
    query = (
        select(KeptEvent)
        .where(KeptEvent.run_id == run_id, KeptEvent.consumed_at.is_(None))
        .order_by(KeptEvent.arrived_at, KeptEvent.id)
    )
    return list(session.execute(query).scalars())
