"""The events store: a run's audit trail, appended along its moves and read back where a
decision depends on it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, func, insert, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.db import dialect, utcnow
from models.dialects import Dialect
from models.enums import EventKind
from models.redaction import redacted
from models.scope import Scope
from models.statements import Write, named
from models.tables import Event

EVENTS: Table = Event.__table__  # type: ignore[assignment]


def record_event(
    session: Session,
    run_id: str,
    *,
    actor: str,
    kind: EventKind,
    from_state: str | None = None,
    to_state: str | None = None,
    detail: Any = None,
    at: datetime | None = None,
) -> None:
    record_events(
        session, run_id, actor=actor, events=[(kind, detail)], at=at, moves=[(from_state, to_state)]
    )


def record_events(
    session: Session,
    run_id: str,
    *,
    actor: str,
    events: Sequence[tuple[EventKind, Any]],
    at: datetime | None = None,
    moves: Sequence[tuple[str | None, str | None]] = (),
) -> None:
    """Append audit events; ``moves`` are the states the first ones move between (events
    past them are facts, not transitions)."""
    for write in events_insert(session, run_id, actor=actor, events=events, at=at, moves=moves):
        dialect(session).execute(session, write)


def events_insert(
    session: Scope,
    run_id: str,
    *,
    actor: str,
    events: Sequence[tuple[EventKind, Any]],
    at: datetime | None = None,
    moves: Sequence[tuple[str | None, str | None]] = (),
) -> list[Write]:
    """The INSERTs of those events, in their order, to be executed with other writes (none
    if no events): one statement on PostgreSQL, whatever their number."""
    # Core inserts: events are never read back through the session, and skipping the ORM's
    # unit of work for them is a measurable share of a step's cost.
    rows = [
        {
            "trigger": EventKind(kind).value,
            "from_state": moves[i][0] if i < len(moves) else None,
            "to_state": moves[i][1] if i < len(moves) else None,
            "detail": redacted(detail) if detail else {},
        }
        for i, (kind, detail) in enumerate(events)
    ]
    common = {"run_id": run_id, "at": at or utcnow(), "actor": actor}
    return dialect(session).insert_rows(EVENT_INSERT, common, rows)


EVENT_COMMON = ("run_id", "at", "actor")
EVENT_KEYS = ("trigger", "from_state", "to_state", "detail")


def events_selected(rows: Any) -> UpdateBase:
    """The INSERT of the events ``rows`` select, their columns in the order of
    ``EVENT_COMMON`` then ``EVENT_KEYS`` (a claim's, a sweep's batch of ends or escalations)."""
    return insert(EVENTS).from_select([*EVENT_COMMON, *EVENT_KEYS], rows)


@named("event.insert", ride=True, shapes=((EVENT_COMMON, EVENT_KEYS),))
def EVENT_INSERT(
    d: Dialect,
    prefix: str,
    guard: FromClause | None,
    common: tuple[str, ...],
    keys: tuple[str, ...],
) -> UpdateBase:
    """Append a run's audit events in order, riding along its move or its insert
    (``events_insert``: every transition and fact; ``record_events``). On PostgreSQL any
    number of events in one statement (``Dialect.insert_rows``); on SQLite one per event."""
    return d.rows_insert(EVENTS, prefix, guard, common, keys)


def record_refusal_once(session: Session, run_id: str, *, actor: str, reason: str) -> bool:
    """Record why a run cannot continue here, unless that is already its latest event.

    The reaper's republishes do not count: they come between one refused delivery and the
    next, and the run has not moved.
    """
    last = session.execute(dialect(session).built(EVENT_LAST), {"run_id": run_id}).first()
    if last is not None and tuple(last) == (EventKind.REFUSED.value, redacted(reason)):
        return False
    record_event(session, run_id, actor=actor, kind=EventKind.REFUSED, detail=reason)
    return True


@named("event.last")
def EVENT_LAST(d: Dialect) -> Any:
    """Read a run's latest event but the reaper's republishes, its kind and detail
    (``record_refusal_once``: a worker or a sweep that cannot continue a run records why once,
    not at every delivery)."""
    return (
        select(Event.trigger, Event.detail)
        .where(
            Event.run_id == bindparam("run_id"),
            Event.trigger != EventKind.REPUBLISH.value,
        )
        .order_by(Event.id.desc())
        .limit(1)
    )


def count_events(session: Session, run_id: str, kind: EventKind) -> int:
    """How many events of ``kind`` the run has (bounds what refusals may add to its record)."""
    params = {"run_id": run_id, "kind": EventKind(kind).value}
    return int(session.execute(dialect(session).built(EVENT_COUNT_OF_KIND), params).scalar_one())


@named("event.count_of_kind")
def EVENT_COUNT_OF_KIND(d: Dialect) -> Any:
    """Count a run's events of one kind (``count_events``: the bound on the operator refusals
    a run's record may gain)."""
    return (
        select(func.count())
        .select_from(Event)
        .where(Event.run_id == bindparam("run_id"), Event.trigger == bindparam("kind"))
    )


def last_event_detail(session: Session, run_id: str, kind: EventKind) -> Any:
    """The detail of the run's latest event of ``kind`` (None if it has none)."""
    params = {"run_id": run_id, "kind": EventKind(kind).value}
    found = session.execute(dialect(session).built(EVENT_LAST_OF_KIND), params).first()
    return None if found is None else found[0]


@named("event.last_of_kind")
def EVENT_LAST_OF_KIND(d: Dialect) -> Any:
    """Read the detail of a run's latest event of one kind (``last_event_detail``: a flow
    version's migration, the answer a run last accepted)."""
    return (
        select(Event.detail)
        .where(Event.run_id == bindparam("run_id"), Event.trigger == bindparam("kind"))
        .order_by(Event.id.desc())
        .limit(1)
    )
