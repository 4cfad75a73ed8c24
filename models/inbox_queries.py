"""Reads for the review inbox: the pending interrupts an actor may answer, oldest first.

One query a page: for each of the actor's roles, its pending interrupts in creation order
(``pending_interrupt_roles``, a row per role of each pending interrupt, whose key is that
order), without those of runs the actor started where separation of duties applies; then the
oldest of them. Pages are keyed by ``(created_at, id)``: a cursor stays valid while interrupts
are answered or added.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import ColumnElement, Subquery, and_, literal, or_, select, union_all
from sqlalchemy.exc import SQLAlchemyError

from models.contracts import InterruptView
from models.db import EPOCH, transaction, utcnow
from models.enums import InterruptKind, InterruptStatus
from models.errors import InterludeError, InvalidInputError
from models.settings import LONGEST_SECONDS
from models.tables import Interrupt, PendingInterruptRole, Run

MAX_PAGE = 200
BAD_CURSOR = "cursor is not one this inbox returned"
# A page's position: when its last interrupt was raised (at most 16 digits of microseconds:
# until the year 2286, well inside what a datetime holds) and that interrupt's id.
CURSOR_PATTERN = r"^([0-9]{1,16})\.([0-9A-Za-z_-]{1,64})$"
CURSOR = re.compile(CURSOR_PATTERN)
ROLE = PendingInterruptRole


@dataclass(frozen=True)
class InboxPage:
    items: list[InterruptView]
    # Pass back as ``cursor`` for the next page; None when this page is the last.
    next_cursor: str | None


def encode_cursor(created_at: datetime, interrupt_id: str) -> str:
    """``<microseconds since 1970, UTC>.<interrupt id>``: every text of this shape (CURSOR) is a
    position, so the API's document can say what a cursor is."""
    micros = (created_at.astimezone(UTC) - EPOCH) // timedelta(microseconds=1)
    return f"{micros}.{interrupt_id}"


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; InvalidInputError for text of another shape."""
    found = CURSOR.fullmatch(cursor)
    if found is None:
        raise InvalidInputError(detail=BAD_CURSOR)
    micros, interrupt_id = found.groups()
    return EPOCH + timedelta(microseconds=int(micros)), interrupt_id


def checked_age(age: float) -> float:
    """``age`` (seconds) if an age filter can hold it, else InvalidInputError."""
    if not 0 <= age <= LONGEST_SECONDS:  # (NaN and infinities included)
        raise InvalidInputError(detail=f"age filters must be 0 to {LONGEST_SECONDS} seconds")
    return age


def answerable_interrupts(
    roles: Iterable[str],
    *,
    actor_id: str | None = None,
    kind: InterruptKind | str | None = None,
    min_age: float | None = None,
    max_age: float | None = None,
    cursor: str | None = None,
    limit: int = 50,
) -> InboxPage:
    """Pending interrupts one of ``roles`` may answer, oldest first.

    ``actor_id`` leaves out interrupts of runs that actor started when the interrupt keeps
    the starter out (separation of duties). ``min_age``/``max_age`` are seconds since the
    interrupt was raised.
    """
    wanted = sorted(set(roles))
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(detail=f"limit must be 1 to {MAX_PAGE}")
    # Conditions on the role's rows (a range of their key) and on the interrupt and its run.
    # The rows are the pending interrupts' only; the interrupt's own status is read anyway.
    conditions: list[ColumnElement[bool]] = [Interrupt.status == InterruptStatus.PENDING.value]
    if kind is not None:
        conditions.append(Interrupt.kind == _kind(kind).value)
    now = utcnow()
    for age, newer in ((min_age, False), (max_age, True)):
        if age is None:
            continue
        edge = now - timedelta(seconds=checked_age(age))
        conditions.append(ROLE.created_at >= edge if newer else ROLE.created_at <= edge)
    if cursor is not None:
        at, last_id = decode_cursor(cursor)
        conditions.append(
            or_(
                ROLE.created_at > at,
                and_(ROLE.created_at == at, ROLE.interrupt_id > last_id),
            )
        )
    if actor_id:
        # Separation of duties: not the interrupts of runs this actor started.
        conditions.append(
            or_(
                Interrupt.separate_from_starter.is_not(True),
                Run.started_by.is_(None),
                Run.started_by != actor_id,
            )
        )
    if not wanted:
        return InboxPage([], None)
    # Each role's first page, read in its key's order, then the oldest of them: the rows read
    # are at most a page per role, however many other roles' interrupts are pending.
    firsts = [select(_oldest(role, conditions, limit).c.interrupt_id) for role in wanted]
    query = (
        select(Interrupt)
        .where(Interrupt.id.in_(firsts[0] if len(firsts) == 1 else union_all(*firsts)))
        .order_by(Interrupt.created_at, Interrupt.id)
        .limit(limit)
    )
    with transaction(readonly=True) as session:
        found = session.execute(query).scalars().all()
        items = [InterruptView.model_validate(i, from_attributes=True) for i in found]
    if len(items) < limit:
        return InboxPage(items, None)
    last = items[-1]
    return InboxPage(items, encode_cursor(last.created_at, last.id))


def _oldest(role: str, conditions: list[ColumnElement[bool]], limit: int) -> Subquery:
    """The ids of ``role``'s ``limit`` oldest pending interrupts that meet ``conditions``."""
    return (
        select(ROLE.interrupt_id)
        .join(Interrupt, Interrupt.id == ROLE.interrupt_id)
        .join(Run, Run.id == Interrupt.run_id)
        .where(ROLE.role == role, *conditions)
        .order_by(ROLE.created_at, ROLE.interrupt_id)
        .limit(limit)
        .subquery()
    )


def _kind(value: InterruptKind | str) -> InterruptKind:
    try:
        return InterruptKind(value)
    except ValueError:
        allowed = ", ".join(k.value for k in InterruptKind)
        raise InvalidInputError(detail=f"unknown kind {value!r}; one of {allowed}") from None


def database_ok() -> bool:
    """Whether the database answers a trivial query (the web server's health check)."""
    try:
        with transaction(readonly=True) as session:
            session.execute(select(literal(1))).scalar_one()
    except (SQLAlchemyError, InterludeError, ValueError):
        # Unreachable, refused, or configured with a URL that names no database (a health
        # check answers 503 for each, never an error of its own).
        return False
    return True
