"""The notifications store: the outbox of what each notifier is owed about an interrupt.

A row per (interrupt, notifier) is written in the transaction that commits the interrupt (riding
along the run's ``suspend``, or copied to the interrupt that supersedes one), only for flows
with notifiers. The notify task marks it done (``notified``, ``skipped`` or ``failed``) or owed
again for its next attempt; the reaper reads the owed ones whose task is overdue through the
``(status, due_at)`` index and publishes them again. Every change is conditional on ``owed``:
a row that is done stays done.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, Table, bindparam, func, insert, literal, null, select, true, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.db import dialect
from models.dialects import Dialect
from models.enums import NotificationStatus
from models.statements import Write, insert_row, named
from models.tables import Interrupt, Notification

NOTIFICATIONS: Table = Notification.__table__  # type: ignore[assignment]
INTERRUPTS: Table = Interrupt.__table__  # type: ignore[assignment]
COLUMNS = tuple(column.key for column in NOTIFICATIONS.columns)
OWED = NotificationStatus.OWED.value


@dataclass(frozen=True)
class Overdue:
    """An owed notification whose task is overdue, and the status of its interrupt now (None:
    the interrupt is gone)."""

    interrupt_id: str
    notifier: str
    run_id: str
    flow_name: str
    flow_version: int
    attempt: int
    error: str | None
    interrupt_status: str | None


def owed_write(
    *,
    interrupt_id: str,
    run_id: str,
    flow_name: str,
    flow_version: int,
    notifier: str,
    now: datetime,
    due_at: datetime,
) -> Write:
    """The INSERT of one owed notification (its first attempt published at commit), to ride
    along the statement that commits the interrupt."""
    row = {
        "interrupt_id": interrupt_id,
        "notifier": notifier,
        "run_id": run_id,
        "flow_name": flow_name,
        "flow_version": flow_version,
        "status": OWED,
        "attempt": 1,
        "due_at": due_at,
        "error": None,
        "created_at": now,
        "done_at": None,
    }
    return Write(NOTIFICATION_INSERT, (), row)


@named("notification.insert", ride=True)
def NOTIFICATION_INSERT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Record a notification owed to one notifier about a new interrupt, riding along the run's
    ``suspend`` (``owed_write``: a step that asks, in a flow with notifiers)."""
    return insert_row(insert(NOTIFICATIONS), NOTIFICATIONS, COLUMNS, prefix, guard)


def owe(session: Session, writes: list[Write]) -> None:
    """Write owed notifications (``owed_write``) on their own, in ``session``'s transaction:
    for an interrupt not committed by a statement they can ride along (a renewed review on a
    newer flow version, asked in the claim's transaction)."""
    for write in writes:
        dialect(session).execute(session, write)


def successor_write(old_id: str, new_id: str, *, now: datetime, due_at: datetime) -> Write:
    """The notifiers owed news of ``old_id`` are owed news of ``new_id``, which supersedes it
    (an escalation, a renewed review), whatever became of the old notifications: the INSERT
    riding along the supersede (``models.interrupts.supersede``)."""
    params = {"old_id": old_id, "new_id": new_id, "new_at": now, "new_due_at": due_at}
    return Write(NOTIFICATION_OWE_SUCCESSOR, (), params)


@named("notification.owe_successor", ride=True)
def NOTIFICATION_OWE_SUCCESSOR(d: Dialect, prefix: str, guard: FromClause | None) -> Any:
    """Owe the notifiers of a superseded interrupt news of its successor, one row each,
    riding along the supersede (``successor_write``: escalations and renewed reviews)."""
    n = NOTIFICATIONS.c
    rows = successor_rows(
        bindparam(prefix + "new_id", type_=n.interrupt_id.type),
        bindparam(prefix + "old_id", type_=n.interrupt_id.type),
        at=bindparam(prefix + "new_at", type_=n.created_at.type),
        due_at=bindparam(prefix + "new_due_at", type_=n.due_at.type),
    )
    if guard is not None:
        rows = rows.select_from(NOTIFICATIONS.join(guard, true()))
    return insert(NOTIFICATIONS).from_select(list(COLUMNS), rows)


def successor_rows(new_id: Any, old_id: Any, *, at: Any, due_at: Any) -> Any:
    """The rows (``COLUMNS``) owing news of interrupt ``new_id`` to each notifier owed news of
    ``old_id``, which it supersedes: SQL expressions, for one interrupt or a join of many
    (``models.successors``)."""
    n = NOTIFICATIONS.c
    return select(
        new_id,
        n.notifier,
        n.run_id,
        n.flow_name,
        n.flow_version,
        literal(OWED, type_=n.status.type),
        literal(1, type_=Integer),
        due_at,
        null(),
        at,
        null(),
    ).where(n.interrupt_id == old_id)


def overdue(session: Session, now: datetime, size: int) -> list[Overdue]:
    """Owed notifications whose task is overdue at ``now``, the longest overdue first, read
    through the (status, due_at) index; rows another reaper holds are skipped, never waited on."""
    rows = session.execute(
        dialect(session).built(NOTIFICATION_OVERDUE), {"now": now, "size": size}
    ).all()
    return [Overdue(*row) for row in rows]


@named("notification.overdue")
def NOTIFICATION_OVERDUE(d: Dialect) -> Any:
    """Select a batch of owed notifications past their due time, with their interrupt's status,
    longest overdue first, skipping rows others hold (``overdue``: the reaper)."""
    n = NOTIFICATIONS.c
    status = select(INTERRUPTS.c.status).where(INTERRUPTS.c.id == n.interrupt_id)
    query = (
        select(
            n.interrupt_id,
            n.notifier,
            n.run_id,
            n.flow_name,
            n.flow_version,
            n.attempt,
            n.error,
            status.scalar_subquery(),
        )
        .where(n.status == OWED, n.due_at <= bindparam("now", type_=n.due_at.type))
        .order_by(n.due_at, n.interrupt_id, n.notifier)
        .limit(bindparam("size", type_=Integer))
    )
    return d.lock_or_skip(query)


def finish(
    session: Session,
    interrupt_id: str,
    notifier: str,
    status: NotificationStatus,
    *,
    at: datetime,
    error: str | None = None,
) -> bool:
    """Mark an owed notification done (``notified``, ``skipped`` or ``failed``); False if it
    was not owed (done already, or never recorded)."""
    params = {
        "of_interrupt": interrupt_id,
        "of_notifier": notifier,
        "to_status": status.value,
        "at": at,
        "to_error": error,
    }
    found = session.execute(dialect(session).built(NOTIFICATION_FINISH), params).all()
    return len(found) == 1


@named("notification.finish")
def NOTIFICATION_FINISH(d: Dialect) -> Any:
    """Mark an owed notification notified, skipped or failed, with its last error (``finish``:
    the notify task, and the reaper for one it gives up on or whose interrupt closed)."""
    n = NOTIFICATIONS.c
    return (
        update(NOTIFICATIONS)
        .where(
            n.interrupt_id == bindparam("of_interrupt"),
            n.notifier == bindparam("of_notifier"),
            n.status == OWED,
        )
        .values(
            status=bindparam("to_status", type_=n.status.type),
            done_at=bindparam("at", type_=n.done_at.type),
            error=bindparam("to_error", type_=n.error.type),
        )
        .returning(n.interrupt_id)
    )


def owe_again(
    session: Session,
    interrupt_id: str,
    notifier: str,
    *,
    attempt: int,
    due_at: datetime,
    error: str | None,
) -> bool:
    """An owed notification's ``attempt`` is published, overdue after ``due_at``, with its last
    ``error`` (None keeps the one recorded); False if it was not owed (done meanwhile: the
    caller publishes nothing)."""
    params = {
        "of_interrupt": interrupt_id,
        "of_notifier": notifier,
        "to_attempt": attempt,
        "to_due_at": due_at,
        "to_error": error,
    }
    found = session.execute(dialect(session).built(NOTIFICATION_OWE_AGAIN), params).all()
    return len(found) == 1


@named("notification.owe_again")
def NOTIFICATION_OWE_AGAIN(d: Dialect) -> Any:
    """Record the next attempt of an owed notification and when its task is overdue
    (``owe_again``: the notify task's retry, and the reaper's republish of an overdue one)."""
    n = NOTIFICATIONS.c
    return (
        update(NOTIFICATIONS)
        .where(
            n.interrupt_id == bindparam("of_interrupt"),
            n.notifier == bindparam("of_notifier"),
            n.status == OWED,
        )
        .values(
            attempt=bindparam("to_attempt", type_=Integer),
            due_at=bindparam("to_due_at", type_=n.due_at.type),
            error=func.coalesce(bindparam("to_error", type_=n.error.type), n.error),
        )
        .returning(n.interrupt_id)
    )


def status_of(session: Session, interrupt_id: str, notifier: str) -> str | None:
    """The status of one notifier's notification about ``interrupt_id`` (None: no row)."""
    params = {"interrupt_id": interrupt_id, "notifier": notifier}
    found = session.execute(dialect(session).built(NOTIFICATION_STATUS), params).first()
    return None if found is None else str(found[0])


@named("notification.status")
def NOTIFICATION_STATUS(d: Dialect) -> Any:
    """Read where one notification stands (``status_of``: the notify task, before it calls
    the notifier, so that a copy of a task whose notification is done calls nobody)."""
    n = NOTIFICATIONS.c
    return select(n.status).where(
        n.interrupt_id == bindparam("interrupt_id"), n.notifier == bindparam("notifier")
    )


def of_run(session: Session, run_id: str) -> list[Notification]:
    """A run's notifications, oldest first (``runs show``)."""
    query = dialect(session).built(NOTIFICATION_OF_RUN)
    return list(session.execute(query, {"run_id": run_id}).scalars())


@named("notification.of_run")
def NOTIFICATION_OF_RUN(d: Dialect) -> Any:
    """Select a run's notifications, oldest first (``of_run``: ``runs show`` and the console)."""
    return (
        select(Notification)
        .where(Notification.run_id == bindparam("run_id"))
        .order_by(Notification.created_at, Notification.notifier)
    )
