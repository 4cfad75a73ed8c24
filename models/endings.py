"""The endings store: waiting runs that a sweep ends together, each with its event and the
interrupt it waited on expired, in one statement on PostgreSQL.

A sweep expires or cancels most of the interrupts it finds due. Each such end is one run's
move by compare-and-set, its event and its interrupt's compare-and-set: one statement, as a
step's commit is. Sent one by one, a batch of ends waited on a round trip each, each paying
the server's start-up of a statement that writes three tables, several times what its rows
cost. Sent as one statement (the ends travelling as one JSON parameter), the batch costs what
its rows do (docs/explanation/performance.md, "A sweep's ends and escalations in one
statement"). SQLite has no data-modifying CTEs and no round trips: it moves each run as
``models.runs.move`` does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Integer, Text, bindparam, column, select, update

from models import json_codec
from models.db import dialect, utcnow
from models.dialects import Dialect, Json
from models.enums import EventKind
from models.events import events_selected
from models.interrupts import INTERRUPTS, PENDING, moved, transition_write
from models.redaction import redacted
from models.runs import RUNS, move, raise_lost_race, run_destination
from models.scope import Scope
from models.statements import named
from models.tables import Interrupt, Run, committed
from statemachine import interrupt_destination

# The interrupt a run waited on is expired with the run's end, where its lifecycle says.
EXPIRE = "expire"
EXPIRED = interrupt_destination(EXPIRE, PENDING).value


@dataclass(frozen=True)
class Ending:
    """One waiting run to end: ``trigger`` (EXPIRE or CANCEL) moves it to where the lifecycle
    says, with one event of ``detail``, its ``error`` set, and ``interrupt`` (pending, what it
    waited on) expired."""

    run: Run
    interrupt: Interrupt
    trigger: EventKind
    detail: dict[str, Any]
    error: str


def end_runs(session: Scope, endings: Sequence[Ending], *, actor: str) -> None:
    """End each run of ``endings`` as ``models.runs.move`` would, with its interrupt's
    expiry riding along, all in one statement on PostgreSQL; ``actor`` did it.

    A run that moved meanwhile raises as ``move`` does (StaleStateError, or RunNotFoundError),
    once the others may have been written: the transaction (or savepoint) must not commit.
    The interrupts are not checked again: the caller holds their rows (a sweep's batch locks
    them), and whatever else closes a pending interrupt moves its run first.
    """
    if not endings:
        return
    if not dialect(session).sweep_writes_at_once:
        for ending in endings:
            close, values = transition_write(ending.interrupt, EXPIRE, resolved_by=actor)
            move(
                session,
                ending.run,
                ending.trigger,
                actor=actor,
                detail=ending.detail,
                writes=[close],
                error=ending.error,
            )
            moved(ending.interrupt, values)
        return
    now = utcnow()
    rows = []
    for ending in endings:
        run = ending.run
        dest = run_destination(ending.trigger, run.state, run.id)
        if not dest.terminal:  # (the statement writes an end: finished, no lease)
            raise ValueError(
                f"{ending.trigger.value} moves run {run.id} to {dest.value}, not an end"
            )
        rows.append(
            {
                "run_id": run.id,
                "seen_version": run.state_version,
                "state": dest.value,
                "error": ending.error,
                "trigger": ending.trigger.value,
                "from_state": run.state,
                "detail": redacted(ending.detail),
                "interrupt_id": ending.interrupt.id,
            }
        )
    params = {"end_rows": json_codec.dumps(rows), "end_now": now, "end_actor": actor}
    found = {row[0] for row in dialect(session).run(session, RUN_END_MANY, (), params).all()}
    expired = {"status": EXPIRED, "resolved_by": actor, "resolved_at": now}
    for ending, row in zip(endings, rows, strict=True):
        if ending.run.id not in found:
            raise_lost_race(session, ending.run, None)
        # What RUN_END_MANY wrote: the values ``move`` sets on a run it ends.
        ended = {
            "state": row["state"],
            "state_version": row["seen_version"] + 1,
            "error": row["error"],
            "lease_owner": None,
            "lease_expires_at": None,
            "updated_at": now,
            "finished_at": now,
        }
        committed(ending.run, ended)
        moved(ending.interrupt, expired)


_GIVEN = (
    column("run_id", Text),
    column("seen_version", Integer),
    column("state", Text),
    column("error", Text),
    column("trigger", Text),
    column("from_state", Text),
    column("detail", Json),
    column("interrupt_id", Text),
)


@named("run.end_many", only="postgresql")
def RUN_END_MANY(d: Dialect) -> Any:
    """End waiting runs together, each by compare-and-set on its state version, with its
    event and the pending interrupt it waited on expired, returning the runs moved
    (``end_runs``: a sweep's expiries and cancellations, a batch in one statement)."""
    now = bindparam("end_now", type_=RUNS.c.updated_at.type)
    actor = bindparam("end_actor", type_=Text)
    # Read once: the three writes below see the same rows.
    given = select(d.json_records("end_rows", _GIVEN, "e", as_text=True)).cte("g")
    ended = (
        update(RUNS)
        .where(RUNS.c.id == given.c.run_id, RUNS.c.state_version == given.c.seen_version)
        .values(
            state=given.c.state,
            state_version=RUNS.c.state_version + 1,
            lease_owner=None,
            lease_expires_at=None,
            error=given.c.error,
            updated_at=now,
            finished_at=now,
        )
        .returning(RUNS.c.id)
        .cte("m")
    )
    events = events_selected(
        select(
            given.c.run_id,
            now,
            actor,
            given.c.trigger,
            given.c.from_state,
            given.c.state,
            given.c.detail,
        ).select_from(given.join(ended, ended.c.id == given.c.run_id)),
    )
    expired = update(INTERRUPTS).where(
        INTERRUPTS.c.id == given.c.interrupt_id,
        INTERRUPTS.c.status == PENDING,
        given.c.run_id.in_(select(ended.c.id)),
    )
    expired = expired.values(status=EXPIRED, resolved_by=actor, resolved_at=now)
    return select(ended.c.id).add_cte(given, events.cte("w"), expired.cte("i"))
