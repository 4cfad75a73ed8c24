"""Read-only queries behind listings and statistics (they write nothing).

Their cost follows the rows of interest (waiting runs, audit rows of one kind), not the whole
history of runs.
"""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime
from typing import Any

from sqlalchemy import func, select, text
from sqlalchemy.orm import Session
from sqlalchemy.sql import Subquery

from models.enums import (
    REPEATED_WORK,
    TERMINAL_STATES,
    EventKind,
    InterruptKind,
    InterruptStatus,
    ResumeOutcome,
    RunState,
)
from models.tables import (
    REPEATED_WORK_TRIGGERS,
    Checkpoint,
    Effect,
    Event,
    Interrupt,
    ResumeAttempt,
    Run,
)

_UNFINISHED = [s.value for s in RunState if s not in TERMINAL_STATES]


def list_runs(
    session: Session, *, state: RunState | None, flow: str | None, limit: int
) -> list[Run]:
    """Runs, newest first."""
    query = select(Run).order_by(Run.created_at.desc(), Run.id).limit(limit)
    if state is not None:
        query = query.where(Run.state == state.value)
    if flow is not None:
        query = query.where(Run.flow_name == flow)
    return list(session.execute(query).scalars())


def checkpoints_of(session: Session, run_id: str) -> list[Checkpoint]:
    query = select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.seq)
    return list(session.execute(query).scalars())


def events_of(session: Session, run_id: str) -> list[Event]:
    return list(
        session.execute(select(Event).where(Event.run_id == run_id).order_by(Event.id)).scalars()
    )


def effects_of(session: Session, run_id: str) -> list[Effect]:
    query = select(Effect).where(Effect.run_id == run_id).order_by(Effect.id)
    return list(session.execute(query).scalars())


# --- statistics --------------------------------------------------------------------------------


def waiting_count(session: Session) -> int:
    return int(
        session.execute(
            select(func.count()).where(Run.state == RunState.WAITING.value)
        ).scalar_one()
    )


def waiting_by_kind(session: Session) -> dict[str, int]:
    """Waiting runs by the kind of interrupt they wait on."""
    rows = session.execute(
        select(Interrupt.kind, func.count(func.distinct(Interrupt.run_id)))
        .join(Run, Run.id == Interrupt.run_id)
        .where(
            Interrupt.status == InterruptStatus.PENDING.value,
            Run.state == RunState.WAITING.value,
        )
        .group_by(Interrupt.kind)
    ).all()
    found = {kind: int(count) for kind, count in rows}
    return {kind.value: found.get(kind.value, 0) for kind in InterruptKind}


def wait_starts(run_ids: Collection[str] | None = None) -> Subquery:
    """``(run_id, since)`` of waiting runs: the one definition of how long a run has waited.

    A run waits since the first interrupt of its current wait: escalations and renewed reviews
    supersede an interrupt but keep the run's state version, so they do not restart the clock,
    and neither does a pause request (it changes no interrupt).
    """
    query = (
        select(Interrupt.run_id.label("run_id"), func.min(Interrupt.created_at).label("since"))
        .join(
            Run,
            (Run.id == Interrupt.run_id) & (Run.state_version == Interrupt.state_version),
        )
        .where(Run.state == RunState.WAITING.value)
        .group_by(Interrupt.run_id)
    )
    if run_ids is not None:
        query = query.where(Interrupt.run_id.in_(list(run_ids)))
    return query.subquery()


def waiting_since_of(session: Session, run_ids: Collection[str]) -> dict[str, datetime]:
    """When each of these runs began its current wait (runs that do not wait are absent)."""
    if not run_ids:
        return {}
    since = wait_starts(run_ids)
    rows = session.execute(select(since.c.run_id, since.c.since)).all()
    return {str(run_id): moment for run_id, moment in rows}


def waiting_since(session: Session) -> tuple[datetime | None, datetime | None]:
    """When the longest and the median wait began (see ``wait_starts``)."""
    since = wait_starts()
    count, oldest = session.execute(select(func.count(), func.min(since.c.since))).one()
    if not count:
        return None, None
    # The median without percentile functions (SQLite has none): the middle one or two rows.
    middle = list(
        session.execute(
            select(since.c.since)
            .order_by(since.c.since)
            .offset((count - 1) // 2)
            .limit(1 if count % 2 else 2)
        ).scalars()
    )
    median = middle[0] + (middle[-1] - middle[0]) / 2
    return oldest, median


def attempts_by_outcome(session: Session) -> dict[str, int]:
    return _counts(session, ResumeAttempt.outcome, ResumeOutcome)


def _counts(session: Session, column: Any, enum: Any) -> dict[str, int]:
    rows = session.execute(select(column, func.count()).group_by(column)).all()
    found = {value: int(count) for value, count in rows}
    return {member.value: found.get(member.value, 0) for member in enum}


def runs_by_state(session: Session) -> dict[str, int]:
    """Runs in each state (every state, 0 included), read through the index on state."""
    return _counts(session, Run.state, RunState)


def failed_runs(session: Session) -> dict[str, dict[str, int]]:
    """Failed runs by flow, then by the step they failed in."""
    rows = session.execute(
        select(Run.flow_name, Run.next_step, func.count())
        .where(Run.state == RunState.FAILED.value)
        .group_by(Run.flow_name, Run.next_step)
    ).all()
    found: dict[str, dict[str, int]] = {}
    for flow, step, count in rows:
        found.setdefault(str(flow), {})[str(step or "")] = int(count)
    return found


def resumed_runs(session: Session) -> dict[str, int]:
    """Runs with an accepted resume, by the state they are in now."""
    resumed = (
        select(ResumeAttempt.run_id)
        .where(ResumeAttempt.outcome == ResumeOutcome.ACCEPTED.value)
        .distinct()
    )
    rows = session.execute(
        select(Run.state, func.count()).where(Run.id.in_(resumed)).group_by(Run.state)
    ).all()
    found = {state: int(count) for state, count in rows}
    return {state.value: found.get(state.value, 0) for state in RunState}


def repeated_work(session: Session) -> dict[EventKind, int]:
    """Totals of the repeated-work events, by kind."""
    # Counter events carry {"count": n}; a step re-execution is one event per execution.
    amount = func.coalesce(Event.detail["count"].as_integer(), 1)
    rows = session.execute(
        select(Event.trigger, func.sum(amount))
        # Read through the partial index on these kinds: the same terms, as literals.
        .where(text(REPEATED_WORK_TRIGGERS))
        .group_by(Event.trigger)
    ).all()
    found = {trigger: int(total or 0) for trigger, total in rows}
    return {kind: found.get(kind.value, 0) for kind in REPEATED_WORK}


# --- flow versions -----------------------------------------------------------------------------


def unfinished_runs_by_version(
    session: Session,
) -> list[tuple[str, int, str, str | None, int]]:
    """``(flow, version, state, next step, count)`` of the runs that have not finished.

    What an operator asks before retiring a flow version: which versions still have runs, and
    at which steps. Read through the ``(flow_name, state)`` index; finished runs are not counted.
    """
    rows = session.execute(
        select(Run.flow_name, Run.flow_version, Run.state, Run.next_step, func.count())
        .where(Run.state.in_(_UNFINISHED))
        .group_by(Run.flow_name, Run.flow_version, Run.state, Run.next_step)
    ).all()
    return [(str(f), int(v), str(s), t, int(n)) for f, v, s, t, n in rows]


def unfinished_run_states(
    session: Session, flow: str, version: int, *, after: str = "", limit: int = 500
) -> list[tuple[str, Any]]:
    """``(run id, flow state)`` of the unfinished runs of one flow version, from their latest
    checkpoints, by run id after ``after``: a page of what a migration would be given."""
    rows = session.execute(
        select(Run.id, Checkpoint.state)
        .join(Checkpoint, (Checkpoint.run_id == Run.id) & (Checkpoint.seq == Run.checkpoint_seq))
        .where(
            Run.flow_name == flow,
            Run.flow_version == version,
            Run.state.in_(_UNFINISHED),
            Run.id > after,
        )
        .order_by(Run.id)
        .limit(limit)
    ).all()
    return [(str(run_id), state) for run_id, state in rows]
