"""The mailbox store: events kept for runs that do not wait on them yet.

An event a run does not wait on yet is kept here, bounded per run, until the run asks for
it; it is consumed once, by the answer it becomes (``consume`` is a compare-and-set on
``consumed_at``, in the transaction that accepts the answer).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Table, bindparam, func, select, update
from sqlalchemy.orm import Session

from models.db import dialect, utcnow
from models.dialects import Dialect
from models.redaction import redacted
from models.statements import named
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
    params = {"run_id": run_id}
    return int(session.execute(dialect(session).built(MAILBOX_COUNT), params).scalar_one())


@named("mailbox.count")
def MAILBOX_COUNT(d: Dialect) -> Any:
    """Count the events a run's mailbox holds, not yet consumed (``count_kept``:
    ``send_event``, the bound on a run's mailbox)."""
    return select(func.count()).where(
        KEPT.c.run_id == bindparam("run_id"), KEPT.c.consumed_at.is_(None)
    )


def oldest_kept(session: Session, run_id: str, name: str) -> KeptEvent | None:
    """The oldest event ``name`` kept for the run, locked (another delivery skips it)."""
    query = dialect(session).built(MAILBOX_OLDEST)
    return session.execute(query, {"run_id": run_id, "name": name}).scalars().first()


@named("mailbox.oldest")
def MAILBOX_OLDEST(d: Dialect) -> Any:
    """Read and lock the oldest event of a name kept for a run, skipping one another delivery
    holds (``oldest_kept``: a step that asks for an event, after its commit)."""
    query = (
        select(KeptEvent)
        .where(
            KeptEvent.run_id == bindparam("run_id"),
            KeptEvent.name == bindparam("name"),
            KeptEvent.consumed_at.is_(None),
        )
        .order_by(KeptEvent.arrived_at, KeptEvent.id)
        .limit(1)
    )
    return d.lock_or_skip(query)


def consume(session: Session, kept_id: int, interrupt_id: str, at: datetime | None = None) -> bool:
    """Mark the event consumed by the answer to ``interrupt_id``; False if it was already."""
    params = {"kept_id": kept_id, "at": at or utcnow(), "by_interrupt": interrupt_id}
    done = session.execute(dialect(session).built(MAILBOX_CONSUME), params).all()
    return len(done) == 1


@named("mailbox.consume")
def MAILBOX_CONSUME(d: Dialect) -> Any:
    """Mark a kept event consumed by an answer, by compare-and-set on ``consumed_at``,
    returning its id (``consume``: the answer the event becomes, in the transaction that
    accepts it)."""
    return (
        update(KEPT)
        .where(KEPT.c.id == bindparam("kept_id", type_=Integer), KEPT.c.consumed_at.is_(None))
        .values(
            consumed_at=bindparam("at", type_=KEPT.c.consumed_at.type),
            interrupt_id=bindparam("by_interrupt"),
        )
        .returning(KEPT.c.id)
    )


def kept_of_run(session: Session, run_id: str) -> list[KeptEvent]:
    """The run's mailbox: events kept and not consumed yet, oldest first."""
    query = dialect(session).built(MAILBOX_OF_RUN)
    return list(session.execute(query, {"run_id": run_id}).scalars())


@named("mailbox.of_run")
def MAILBOX_OF_RUN(d: Dialect) -> Any:
    """Read a run's mailbox, the events kept and not consumed yet, oldest first
    (``kept_of_run``: a run's view)."""
    return (
        select(KeptEvent)
        .where(KeptEvent.run_id == bindparam("run_id"), KeptEvent.consumed_at.is_(None))
        .order_by(KeptEvent.arrived_at, KeptEvent.id)
    )
