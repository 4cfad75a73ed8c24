"""The successors store: interrupts a sweep supersedes together (its escalations), each with
its successor, the notifications owed of it and the run's event, in one statement on
PostgreSQL.

One escalation is one statement (``models.interrupts.supersede``): the compare-and-set on the
old interrupt, the new row, the notifications and the event riding along. A batch of them
paid the server's start-up of that statement once each; as one statement, the successors
travelling as one JSON parameter, it pays what the rows cost, as ``models.endings`` does for
the runs a sweep ends. SQLite supersedes each one as ``supersede`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import (
    JSON,
    Boolean,
    Integer,
    Text,
    bindparam,
    column,
    insert,
    literal,
    null,
    select,
    update,
)
from sqlalchemy.orm import Session

from models import json_codec
from models.db import dialect, utcnow
from models.dialects import Dialect, Json, Timestamp
from models.enums import EventKind
from models.events import events_insert, events_selected
from models.interrupts import INTERRUPT_COLUMNS, INTERRUPTS, PENDING, moved, supersede
from models.notifications import COLUMNS as NOTIFICATION_COLUMNS
from models.notifications import NOTIFICATIONS, successor_rows
from models.redaction import redacted
from models.settings import get_settings, notify_due_in
from models.statements import named
from models.tables import Interrupt
from statemachine import interrupt_destination

SUPERSEDED = interrupt_destination("supersede", PENDING).value
# Columns of JSON: each value travels as a list of one, so that JSON's null stays JSON's null
# (a column of ``jsonb_to_recordset`` reads it as SQL's NULL), as a row written alone keeps it.
_JSON_COLUMNS = frozenset(c for c in INTERRUPT_COLUMNS if isinstance(INTERRUPTS.c[c].type, JSON))


@dataclass(frozen=True)
class Succession:
    """``renewed`` (``models.interrupts.successor`` of ``old``, not written) asks in place of
    ``old``, pending; the run's event (ESCALATE) says ``detail``."""

    old: Interrupt
    renewed: Interrupt
    detail: dict[str, Any]


def supersede_all(session: Session, successions: Sequence[Succession], *, actor: str) -> set[str]:
    """Each ``old`` superseded by its ``renewed`` as ``supersede`` does it, the run's event
    riding along, all in one statement on PostgreSQL; ``actor`` did it. The ids of the old
    interrupts superseded: one no longer pending is not, and nothing of its succession is
    written."""
    if not successions:
        return set()
    if not dialect(session).sweep_writes_at_once:
        done = set()
        for s in successions:
            event = events_insert(
                session, s.old.run_id, actor=actor, events=[(EventKind.ESCALATE, s.detail)]
            )
            if supersede(session, s.old, s.renewed, resolved_by=actor, writes=event):
                done.add(s.old.id)
        return done
    now = utcnow()
    rows = [
        {
            "old_id": s.old.id,
            "detail": redacted(s.detail),
            **{c: _travelling(c, getattr(s.renewed, c)) for c in INTERRUPT_COLUMNS},
        }
        for s in successions
    ]
    params = {
        "succession_rows": json_codec.dumps(rows),
        "succession_now": now,
        "succession_due_at": now + timedelta(seconds=notify_due_in(get_settings())),
        "succession_actor": actor,
    }
    run = dialect(session).run(session, INTERRUPT_SUPERSEDE_MANY, (), params)
    found = {row[0] for row in run.all()}
    for s in successions:
        if s.old.id in found:
            moved(
                s.old,
                {
                    "status": SUPERSEDED,
                    "superseded_by": s.renewed.id,
                    "resolved_by": actor,
                    "resolved_at": now,
                },
            )
    return found


def _travelling(name: str, value: Any) -> Any:
    """``value`` of column ``name`` as the JSON parameter carries it."""
    if name in _JSON_COLUMNS:
        return [value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


def _given_type(name: str) -> Any:
    """The type column ``name`` is read as from the JSON parameter (text for text, whatever
    its length or domain: the INSERT checks it as it checks a parameter)."""
    kind = INTERRUPTS.c[name].type
    if name in _JSON_COLUMNS:
        return Json
    for typed in (Timestamp, Integer, Boolean):
        if isinstance(kind, typed):
            return kind
    return Text


@named("interrupt.supersede_many", only="postgresql")
def INTERRUPT_SUPERSEDE_MANY(d: Dialect) -> Any:
    """Supersede interrupts together, each by compare-and-set on its status, with its
    successor, the notifications owed of it and the run's event, returning the interrupts
    superseded (``supersede_all``: a sweep's escalations, a batch in one statement)."""
    now = bindparam("succession_now", type_=INTERRUPTS.c.created_at.type)
    actor = bindparam("succession_actor", type_=Text)
    given_columns = [column("old_id", Text), column("detail", Json)]
    given_columns += [column(c, _given_type(c)) for c in INTERRUPT_COLUMNS]
    # Read once: the four writes below see the same rows.
    given = select(d.json_records("succession_rows", given_columns, "e", as_text=True)).cte("g")
    superseded = (
        update(INTERRUPTS)
        .where(INTERRUPTS.c.id == given.c.old_id, INTERRUPTS.c.status == PENDING)
        .values(status=SUPERSEDED, superseded_by=given.c.id, resolved_by=actor, resolved_at=now)
        .returning(INTERRUPTS.c.id)
        .cte("s")
    )
    succeeding = given.join(superseded, superseded.c.id == given.c.old_id)
    renewed = insert(INTERRUPTS).from_select(
        list(INTERRUPT_COLUMNS),
        select(
            *(
                given.c[c].op("->")(0) if c in _JSON_COLUMNS else given.c[c]
                for c in INTERRUPT_COLUMNS
            )
        ).select_from(succeeding),
    )
    due_at = bindparam("succession_due_at", type_=NOTIFICATIONS.c.due_at.type)
    owed = insert(NOTIFICATIONS).from_select(
        list(NOTIFICATION_COLUMNS),
        successor_rows(given.c.id, given.c.old_id, at=now, due_at=due_at).select_from(
            NOTIFICATIONS.join(succeeding, NOTIFICATIONS.c.interrupt_id == given.c.old_id)
        ),
    )
    events = events_selected(
        select(
            given.c.run_id,
            now,
            actor,
            literal(EventKind.ESCALATE.value, type_=Text),
            null(),
            null(),
            given.c.detail,
        ).select_from(succeeding),
    )
    return select(superseded.c.id).add_cte(given, renewed.cte("n"), owed.cte("o"), events.cte("w"))
