"""The runs store: a run's row inserted, found and locked, and its moves through the lifecycle.

Every transition is ``UPDATE runs ... WHERE id = :id AND state_version = :seen`` (optionally
fenced on the lease epoch too); zero rows means another process moved the run first, and the
caller gets a typed error naming what it expected and what it found. Writes that are not
transitions (a pause request here, a lease renewal in ``models.claims``, a republish in
``models.recovery``) are compare-and-set too.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import pairwise
from typing import Any, NoReturn

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.checkpoints import checkpoint_insert
from models.db import dialect, readable_rows, utcnow
from models.dialects import Dialect
from models.enums import EventKind, RunState
from models.errors import FencedError, InvalidTransitionError, RunNotFoundError, StaleStateError
from models.events import events_insert, record_event
from models.scope import Scope
from models.statements import Write, insert_row, named, only_if, row_values
from models.storable import new_id, storable_id
from models.tables import Checkpoint, Run, committed, from_row, loaded
from statemachine import TERMINAL_STATES, TransitionNotAllowed, destination

RUNS: Table = Run.__table__  # type: ignore[assignment]
# Written by ``move`` alone, from the lifecycle: a caller's fields may not override them.
LIFECYCLE_FIELDS = frozenset({"state", "state_version", "updated_at"})
NON_TERMINAL = [s.value for s in RunState if s not in TERMINAL_STATES]


def run_destination(trigger: str, current: str, run_id: str) -> RunState:
    """The lifecycle's answer for ``trigger`` from ``current``, as interlude's own error."""
    try:
        return destination(trigger, current)
    except TransitionNotAllowed:
        raise InvalidTransitionError(run_id=run_id, trigger=trigger, found=current) from None


def insert_run(
    session: Scope,
    *,
    flow_name: str,
    flow_version: int,
    input: Any,
    first_step: str,
    idempotency_key: str | None,
    started_by: str | None,
    budget: float | None,
) -> Run:
    """A new queued run with its initial checkpoint (sequence 0) and its first event.

    Plain inserts (this is the application's enqueue path); the returned Run is not attached
    to the session.
    """
    now = utcnow()
    values: dict[str, Any] = {
        "id": new_id(),
        "flow_name": flow_name,
        "flow_version": flow_version,
        "input": input,
        "state": RunState.QUEUED.value,
        "state_version": 0,
        "next_step": first_step,
        "checkpoint_seq": 0,
        "idempotency_key": idempotency_key,
        "started_by": started_by,
        "lease_epoch": 0,
        "lost_leases": 0,
        "step_attempts": 0,
        "step_executions": 0,
        "budget_allowance": budget,
        "budget_consumed": 0.0,
        "dispatched_at": now,
        "created_at": now,
        "updated_at": now,
    }
    run = loaded(Run, values)
    first = loaded(
        Checkpoint,
        {
            "id": new_id(),
            "run_id": run.id,
            "seq": 0,
            "step": None,
            "next_step": first_step,
            "state": {},
            "budget_consumed": 0.0,
            "effects": [],
            "epoch": 0,
            "created_at": now,
        },
    )
    enqueued = events_insert(
        session,
        run.id,
        actor=started_by or "app",
        events=[(EventKind.ENQUEUE, {"flow": flow_name, "version": flow_version})],
        at=now,
        moves=[(None, RunState.QUEUED.value)],
    )
    dialect(session).execute_with(
        session,
        Write(RUN_INSERT, (), values),
        [checkpoint_insert(session, first), *enqueued],
    )
    return run


# What ``insert_run`` gives a new run (the other columns are NULL).
NEW_RUN_COLUMNS = (
    "id",
    "flow_name",
    "flow_version",
    "input",
    "state",
    "state_version",
    "next_step",
    "checkpoint_seq",
    "idempotency_key",
    "started_by",
    "lease_epoch",
    "lost_leases",
    "step_attempts",
    "step_executions",
    "budget_allowance",
    "budget_consumed",
    "dispatched_at",
    "created_at",
    "updated_at",
)


@named("run.insert", ride=True)
def RUN_INSERT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Insert a new queued run, with its checkpoint 0 and its ``enqueue`` event riding along
    (``insert_run``: ``enqueue_run``)."""
    return insert_row(insert(RUNS), RUNS, NEW_RUN_COLUMNS, prefix, guard)


def find_by_key(session: Session, key: str) -> tuple[str, str] | None:
    """``(run id, flow name)`` of the run started with idempotency key ``key``."""
    found = session.execute(dialect(session).built(RUN_BY_KEY), {"key": key}).one_or_none()
    return None if found is None else (str(found.id), str(found.flow_name))


@named("run.by_key")
def RUN_BY_KEY(d: Dialect) -> Any:
    """Find the run started with an idempotency key (``find_by_key``: ``enqueue_run`` given a
    key, before it inserts)."""
    return select(Run.id, Run.flow_name).where(Run.idempotency_key == bindparam("key"))


def load_run(session: Session, run_id: str) -> Run:
    run = find_run(session, run_id)
    if run is None:
        raise RunNotFoundError(run_id=run_id)
    return run


def find_run(session: Session, run_id: str) -> Run | None:
    if not storable_id(run_id):
        return None
    return session.get(Run, run_id)


def load_runs(session: Session, run_ids: Collection[str]) -> tuple[dict[str, Run], dict[str, str]]:
    """The runs of ``run_ids`` by id, and the ids of those that could not be read, with why."""
    if not run_ids:
        return {}, {}
    query = dialect(session).built(RUN_MANY)
    rows, unreadable = readable_rows(session, query, {"run_ids": list(run_ids)})
    return {run.id: run for run in rows}, unreadable


def lock_run(session: Session, run_id: str) -> Run | None:
    """The run as it is now, locked until commit: answers to one ask group queue here."""
    found = session.execute(dialect(session).built(RUN_LOCK), {"run_id": run_id}).first()
    return from_row(Run, found) if found is not None else None


@named("run.lock")
def RUN_LOCK(d: Dialect) -> Any:
    """Read a run, locked until commit (``lock_run``: the gateway and the sweep, so that
    answers to one ask group are counted one after the other)."""
    return d.lock(select(*RUNS.c).where(RUNS.c.id == bindparam("run_id")))


@named("run.many")
def RUN_MANY(d: Dialect) -> Any:
    """Read runs by their ids (``load_runs``: the expiry sweep, the runs of its batch of due
    interrupts)."""
    return select(Run).where(Run.id.in_(bindparam("run_ids", expanding=True)))


def move(
    session: Scope,
    run: Run,
    trigger: EventKind,
    *,
    actor: str,
    detail: Any = None,
    fence_epoch: int | None = None,
    facts: Sequence[tuple[EventKind, Any]] = (),
    writes: Sequence[Write] = (),
    **fields: Any,
) -> Run:
    """Apply ``trigger`` to ``run`` as a CAS on its state version and append the audit event.

    ``fence_epoch`` additionally requires that the lease epoch is still ours; a mismatch
    raises FencedError (a stale owner), any other lost race StaleStateError. ``facts`` are
    events that are not transitions, and ``writes`` rows of other tables (a checkpoint, an
    interrupt, effect outcomes, built by the stores), written in the same round trip.
    """
    return move_through(
        session,
        run,
        [(trigger, detail)],
        actor=actor,
        fence_epoch=fence_epoch,
        facts=facts,
        writes=writes,
        **fields,
    )


def move_through(
    session: Scope,
    run: Run,
    triggers: Sequence[tuple[EventKind, Any]],
    *,
    actor: str,
    fence_epoch: int | None = None,
    facts: Sequence[tuple[EventKind, Any]] = (),
    writes: Sequence[Write] = (),
    **fields: Any,
) -> Run:
    """Apply several triggers in order as one CAS, one audit event each (and one per fact).

    A task that continues a run commits ``advance`` and the next ``claim`` this way: one
    UPDATE instead of two. The run's pause request comes back with it (it is not part of the
    state version, so it is read fresh here).

    The events and ``writes`` go in the same round trip as the update, so when it raises (a
    lost race) they may have been written: the transaction (or savepoint) must not commit.
    """
    _move(
        session,
        run,
        triggers,
        actor=actor,
        fence_epoch=fence_epoch,
        facts=facts,
        writes=writes,
        then=None,
        fields=fields,
    )
    return run


def move_recorded(
    session: Scope,
    run: Run,
    trigger: EventKind,
    *,
    actor: str,
    detail: Any = None,
    writes: Sequence[Write],
    then: Write,
    given: Write | None = None,
    **fields: Any,
) -> Any:
    """``move``, and ``then`` after it in the same round trip, guarded on the last of
    ``writes`` (a compare-and-set returning its row): written only if the run and that row
    both moved. Returns the first column ``then`` returned. ``given``: a query the run's move
    is guarded on in turn (a lost race if it finds nothing).

    None when the last write matched nothing: then the run's move and the other writes were
    made all the same, and the caller's transaction must roll back. A lost race on the run
    raises as ``move`` does.
    """
    return _move(
        session,
        run,
        [(trigger, detail)],
        actor=actor,
        fence_epoch=None,
        facts=(),
        writes=writes,
        then=then,
        fields=fields,
        given=given,
    )


def _move(
    session: Scope,
    run: Run,
    triggers: Sequence[tuple[EventKind, Any]],
    *,
    actor: str,
    fence_epoch: int | None,
    facts: Sequence[tuple[EventKind, Any]],
    writes: Sequence[Write],
    then: Write | None,
    fields: dict[str, Any],
    given: Write | None = None,
) -> Any:
    """The CAS of ``move_through`` (``run`` updated in place), and what ``then`` returned."""
    overridden = LIFECYCLE_FIELDS & fields.keys()
    if overridden:
        raise ValueError(f"{sorted(overridden)} are set by the lifecycle, not by callers")
    states = [run.state]
    for trigger, _ in triggers:
        states.append(run_destination(trigger, states[-1], run.id).value)
    dest = RunState(states[-1])
    now = utcnow()
    values: dict[str, Any] = dict(fields)
    if dest.terminal:
        values.setdefault("finished_at", now)
        values.setdefault("lease_owner", None)
        values.setdefault("lease_expires_at", None)
    values.update(state=dest.value, state_version=run.state_version + len(triggers), updated_at=now)
    events = events_insert(
        session,
        run.id,
        actor=actor,
        events=[*triggers, *facts],
        at=now,
        moves=list(pairwise(states)),
    )
    strategy, move = dialect(session), _move_write(run, values, fence_epoch)
    if then is None:
        returned, recorded = strategy.execute_with(session, move, [*events, *writes]).first(), None
    else:
        returned, recorded = strategy.execute_chain(
            session, move, [*events, *writes], then, given=given
        )
    if returned is None:
        raise_lost_race(session, run, fence_epoch)
    values["pause_requested_by"] = returned.pause_requested_by
    committed(run, values)
    return recorded


def _move_write(run: Run, values: dict[str, Any], fence_epoch: int | None) -> Write:
    """The compare-and-set UPDATE of a transition, as a statement of its shape."""
    params = {f"set_{k}": v for k, v in values.items()}
    params.update(run_id=run.id, seen_version=run.state_version, fence_epoch=fence_epoch)
    return Write(RUN_MOVE, (fence_epoch is not None, tuple(sorted(values))), params)


# Two moves of W1, for the reference: a step's suspend (fenced), an accepted resume.
_SUSPEND = ("lease_expires_at", "lease_owner", "state", "state_version", "updated_at")
_RESUME = ("dispatched_at", "state", "state_version", "updated_at")


@named("run.move", ride=True, shapes=((True, _SUSPEND), (False, _RESUME)))
def RUN_MOVE(
    d: Dialect, prefix: str, guard: FromClause | None, fenced: bool, columns: tuple[str, ...]
) -> UpdateBase:
    """Move a run by compare-and-set on its state version (and, ``fenced``, its lease epoch),
    setting ``columns``; its events, checkpoint, interrupt, effect outcomes ride along
    (``move``, ``move_through``, ``move_recorded``, ``claim``: every transition)."""
    stmt = update(RUNS).where(
        RUNS.c.id == bindparam(prefix + "run_id"),
        RUNS.c.state_version == bindparam(prefix + "seen_version"),
    )
    if fenced:
        stmt = stmt.where(RUNS.c.lease_epoch == bindparam(prefix + "fence_epoch"))
    set_to = row_values(RUNS, columns, prefix + "set_")
    return only_if(stmt, guard).values(set_to).returning(RUNS.c.pause_requested_by)


def raise_lost_race(session: Scope, run: Run, fence_epoch: int | None) -> NoReturn:
    """Why ``run``'s compare-and-set matched nothing, as interlude's error (read from the run
    as it is now)."""
    found = dialect(session).run(session, RUN_FOUND, (), {"run_id": run.id}).first()
    if found is None:
        raise RunNotFoundError(run_id=run.id)
    if fence_epoch is not None and found.lease_epoch != fence_epoch:
        raise FencedError(run_id=run.id, epoch=fence_epoch)
    raise StaleStateError(
        run_id=run.id,
        expected=f"{run.state} (version {run.state_version})",
        found=f"{found.state} (version {found.state_version})",
    )


@named("run.found")
def RUN_FOUND(d: Dialect) -> Any:
    """Read a run's state, version and epoch after a compare-and-set matched nothing, to say
    why (``move``: the error naming what was expected and what was found)."""
    return select(RUNS.c.state, RUNS.c.state_version, RUNS.c.lease_epoch).where(
        RUNS.c.id == bindparam("run_id")
    )


def request_pause(session: Session, run_id: str, *, actor: str) -> bool:
    """Ask a run that has not finished to stop at its next step boundary."""
    params = {"run_id": run_id, "actor": actor, "now": utcnow()}
    result = session.execute(dialect(session).built(RUN_REQUEST_PAUSE), params)
    if result.rowcount != 1:  # type: ignore[attr-defined]
        return False
    record_event(session, run_id, actor=actor, kind=EventKind.PAUSE_REQUESTED, detail={})
    return True


@named("run.request_pause")
def RUN_REQUEST_PAUSE(d: Dialect) -> Any:
    """Ask a run that has not finished to stop at its next step boundary (``request_pause``:
    an operator's pause)."""
    return (
        update(RUNS)
        .where(RUNS.c.id == bindparam("run_id"), RUNS.c.state.in_(NON_TERMINAL))
        .values(
            pause_requested_by=bindparam("actor"),
            updated_at=bindparam("now", type_=RUNS.c.updated_at.type),
        )
    )
