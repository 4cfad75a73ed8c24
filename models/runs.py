"""The runs store: the only code that reads or writes runs, checkpoints and events.

Every transition is ``UPDATE runs ... WHERE id = :id AND state_version = :seen`` (optionally
fenced on the lease epoch too); zero rows means another process moved the run first, and the
caller gets a typed error naming what it expected and what it found. Writes that are not
transitions (a lease renewal, a pause request, a republish) are compare-and-set too.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import pairwise
from typing import Any, NoReturn

from sqlalchemy import (
    Boolean,
    Float,
    Integer,
    Table,
    Text,
    and_,
    bindparam,
    column,
    exists,
    func,
    insert,
    literal,
    null,
    or_,
    select,
    union_all,
    update,
)
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.db import dialect, readable_rows, utcnow
from models.dialects import Dialect, count_write
from models.enums import EffectStatus, EventKind, InterruptStatus, RunState
from models.errors import (
    FencedError,
    InvalidTransitionError,
    RunNotFoundError,
    StaleStateError,
)
from models.redaction import redacted
from models.scope import Scope
from models.statements import Write, insert_row, named, only_if, row_values
from models.tables import (
    Checkpoint,
    Effect,
    Event,
    Interrupt,
    Run,
    column_keys,
    committed,
    from_row,
    loaded,
)
from statemachine import CLAIMABLE, TERMINAL_STATES, TransitionNotAllowed, destination

RUNS: Table = Run.__table__  # type: ignore[assignment]
EVENTS: Table = Event.__table__  # type: ignore[assignment]
CHECKPOINTS: Table = Checkpoint.__table__  # type: ignore[assignment]
INTERRUPTS: Table = Interrupt.__table__  # type: ignore[assignment]
EFFECTS: Table = Effect.__table__  # type: ignore[assignment]
# Written by ``move`` alone, from the lifecycle: a caller's fields may not override them.
CHECKPOINT_COLUMNS = tuple(column.key for column in CHECKPOINTS.columns)
LIFECYCLE_FIELDS = frozenset({"state", "state_version", "updated_at"})
NON_TERMINAL = [s.value for s in RunState if s not in TERMINAL_STATES]


def new_id() -> str:
    return uuid.uuid4().hex


def storable_text(text: str) -> bool:
    """Whether either database can store ``text``: no NUL (PostgreSQL refuses it in text and
    JSON) and no lone surrogate (no UTF-8 encodes one; Python decodes one from JSON's
    ``"\ud800"`` or from bytes that are not UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_copy(text: str) -> str:
    """``text`` with what no database stores (NUL, lone surrogates) written as escapes."""
    if storable_text(text):
        return text
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_where(value: Any) -> str | None:
    """Where ``value`` (JSON) holds text with NUL or lone surrogates, in a key or a value at
    any depth: ``" at 'a.b[0]'"``, ``""`` for the value itself, None if nowhere."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and not storable_text(item):
            return _where(path)
        if isinstance(item, dict):
            for key, child in item.items():
                inner = f"{path}.{key}" if path else key
                if not storable_text(key):
                    return _where(inner)
                stack.append((child, inner))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def _where(path: str) -> str:
    # repr: the path may hold the very characters refused; cut so that the line stays short.
    return f" at {path[:60]!r}" if path else ""


def storable_id(value: object) -> bool:
    """Whether ``value`` could name a stored row: storable text. A lookup by any other id is
    answered "none" without asking the database, which would refuse the text itself."""
    return isinstance(value, str) and storable_text(value)


def run_destination(trigger: str, current: str, run_id: str) -> RunState:
    """The lifecycle's answer for ``trigger`` from ``current``, as interlude's own error."""
    try:
        return destination(trigger, current)
    except TransitionNotAllowed:
        raise InvalidTransitionError(run_id=run_id, trigger=trigger, found=current) from None


# --- events ------------------------------------------------------------------------------------


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


# --- runs and checkpoints ----------------------------------------------------------------------


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


@dataclass
class Claimable:
    run: Run
    checkpoint: Checkpoint
    # The interrupts answered at that checkpoint.
    answered: list[Interrupt]
    # Whether an effect of the run was left in ``intent`` (its outcome unknown).
    unsettled: bool


def load_claimable(session: Session, run_id: str) -> Claimable | None:
    """The run, its latest checkpoint, the interrupts answered there and whether effects are
    unsettled, in one query, if the run may be claimed now.

    The later ``claim`` finds the run in the session without another query.
    """
    query = dialect(session).built(RUN_CLAIMABLE)
    rows = session.execute(query, {"claimed_run": run_id}).all()
    if not rows or rows[0][0].state not in CLAIMABLE:
        return None
    first = rows[0]
    return Claimable(
        first[0], first[1], [row[2] for row in rows if row[2] is not None], bool(first[3])
    )


@named("run.claimable")
def RUN_CLAIMABLE(d: Dialect) -> Any:
    """Read a run with its latest checkpoint, the answers given there and whether effects are
    unsettled, to claim it the long way (``load_claimable``: the step task, when the claim in
    one statement did not take it or the database is SQLite)."""
    # An answer another answer renewed (``superseded_by``) no longer answers anything.
    answered = (
        (Interrupt.run_id == Run.id)
        & (Interrupt.checkpoint_id == Checkpoint.id)
        & Interrupt.superseded_by.is_(None)
    )
    unsettled = exists(
        select(Effect.id).where(Effect.run_id == Run.id, Effect.status == EffectStatus.INTENT.value)
    ).label("unsettled")
    return (
        select(Run, Checkpoint, Interrupt, unsettled)
        .join(
            Checkpoint,
            (Checkpoint.run_id == Run.id) & (Checkpoint.seq == Run.checkpoint_seq),
        )
        .outerjoin(Interrupt, answered & (Interrupt.status == InterruptStatus.RESOLVED.value))
        .where(Run.id == bindparam("claimed_run"))
    )


@dataclass
class ClaimedRun(Claimable):
    """A run claimed by this worker, as ``claim_at_once`` found it; ``resuming``: it was
    claimed from ``resuming`` (an accepted resume continues it)."""

    resuming: bool


@dataclass(frozen=True)
class ClaimableStep:
    """A step this process can claim in one statement: a run of ``flow`` pinned to
    ``version`` (no migration), about to run ``step``, gets a lease of ``lease_seconds``.

    ``revalidates``: the flow checks answers again in the worker when the gateway could not
    (a resuming run of it is claimed the long way, which reads its last acceptance).
    """

    flow: str
    version: int
    step: str
    lease_seconds: float
    revalidates: bool


class ClaimableSteps:
    """The steps ``claim_at_once`` may claim, with the statement's parameter for them made
    once (a worker builds this when its flows change, not at every claim)."""

    def __init__(self, steps: Sequence[ClaimableStep]) -> None:
        self.param = json.dumps(
            [
                {
                    "flow": s.flow,
                    "version": s.version,
                    "step": s.step,
                    "lease": s.lease_seconds,
                    "revalidates": s.revalidates,
                }
                for s in steps
            ]
        )


def claim_at_once(
    session: Scope, run_id: str, *, owner: str, steps: ClaimableSteps
) -> ClaimedRun | None:
    """Claim the run in one statement if it is due and at one of ``steps``; else None.

    The common claim, as one data-modifying statement that is its own transaction (PostgreSQL;
    see ``Dialect.claims_in_one_statement``): the compare-and-set on the version just read, the
    fresh lease and epoch, the ``claim`` event (and ``step_reexecuted`` when the step ran
    before), and the run, its latest checkpoint, the answers given there and whether effects
    are unsettled, returned. None writes nothing, and may mean only that the claim needs the
    long way (``load_claimable``, then ``claim``): a migration, a refusal, a run not due yet
    or not claimable at all.
    """
    now = utcnow()
    params = {
        "claim_run": run_id,
        "claim_owner": owner,
        "claim_actor": f"worker:{owner}",
        "claim_now": now,
        "claim_steps": steps.param,
    }
    count_write(session)
    rows = dialect(session).run(session, RUN_CLAIM_AT_ONCE, (), params).all()
    return _claimed_from(rows) if rows else None


@named("run.claim_at_once", only="postgresql")
def RUN_CLAIM_AT_ONCE(d: Dialect) -> Any:
    """Claim a due run at one of this worker's steps in one statement: the compare-and-set,
    the fresh lease and epoch, its ``claim`` (and ``step_reexecuted``) events, and the run, its
    checkpoint, its answers and whether effects are unsettled returned (``claim_at_once``: the
    step task; PostgreSQL only, see ``Dialect.claims_in_one_statement``)."""
    now = bindparam("claim_now", type_=RUNS.c.updated_at.type)
    run_id = bindparam("claim_run", type_=RUNS.c.id.type)
    seen = select(RUNS.c.id, RUNS.c.state, RUNS.c.state_version).where(RUNS.c.id == run_id).cte("o")
    steps = d.json_records(
        "claim_steps",
        [
            column("flow", Text),
            column("version", Integer),
            column("step", Text),
            column("lease", Float),
            column("revalidates", Boolean),
        ],
        "s",
        as_text=True,
    )
    claimed = (
        update(RUNS)
        .where(
            RUNS.c.id == seen.c.id,
            RUNS.c.state_version == seen.c.state_version,  # the compare-and-set
            RUNS.c.state.in_(CLAIMABLE),
            or_(RUNS.c.not_before.is_(None), RUNS.c.not_before <= now),
            RUNS.c.flow_name == steps.c.flow,
            RUNS.c.flow_version == steps.c.version,
            RUNS.c.next_step == steps.c.step,
            ~and_(RUNS.c.state == RunState.RESUMING.value, steps.c.revalidates),
        )
        .values(
            state=RunState.RUNNING.value,
            state_version=RUNS.c.state_version + 1,
            lease_owner=bindparam("claim_owner"),
            lease_epoch=RUNS.c.lease_epoch + 1,
            lease_expires_at=d.seconds_after(now, steps.c.lease),
            step_executions=RUNS.c.step_executions + 1,
            not_before=None,
            updated_at=now,
        )
        .returning(*RUNS.c, seen.c.state.label("claimed_from"))
        .cte("c")
    )
    actor = bindparam("claim_actor", type_=Text)
    claim_event = select(
        literal(EventKind.CLAIM.value).label("trigger"),
        claimed.c.claimed_from.label("from_state"),
        literal(RunState.RUNNING.value).label("to_state"),
        d.json_object("epoch", claimed.c.lease_epoch, "step", claimed.c.next_step).label("detail"),
    )
    again = select(
        literal(EventKind.STEP_REEXECUTED.value),
        null(),
        null(),
        d.json_object("step", claimed.c.next_step, "executions", claimed.c.step_executions),
    ).where(claimed.c.step_executions > 1)
    # The claim's event, then the re-execution's: ``UNION ALL`` runs its branches in order and a
    # data-modifying statement is never planned in parallel, so the ids follow (no sort: see
    # ``Dialect.rows_insert``).
    given = union_all(claim_event, again).subquery("e")
    events = insert(EVENTS).from_select(
        ["run_id", "at", "actor", "trigger", "from_state", "to_state", "detail"],
        select(
            run_id,
            now,
            actor,
            given.c.trigger,
            given.c.from_state,
            given.c.to_state,
            given.c.detail,
        ),
    )
    answered = (
        (INTERRUPTS.c.run_id == claimed.c.id)
        & (INTERRUPTS.c.checkpoint_id == CHECKPOINTS.c.id)
        & (INTERRUPTS.c.status == InterruptStatus.RESOLVED.value)
        & INTERRUPTS.c.superseded_by.is_(None)
    )
    unsettled = exists(
        select(EFFECTS.c.id).where(
            EFFECTS.c.run_id == claimed.c.id, EFFECTS.c.status == EffectStatus.INTENT.value
        )
    )
    return (
        select(
            *claimed.c,
            *CHECKPOINTS.c,
            *(INTERRUPTS.c[key] for key in _INTERRUPT_KEYS),
            unsettled.label("unsettled"),
        )
        .select_from(
            claimed.join(
                CHECKPOINTS,
                (CHECKPOINTS.c.run_id == claimed.c.id)
                & (CHECKPOINTS.c.seq == claimed.c.checkpoint_seq),
            ).outerjoin(INTERRUPTS, answered)
        )
        .add_cte(events.cte("w"))
    )


# The claim's result columns: the run's, whence it was claimed, its checkpoint's, and of each
# answer what the step is told (``worker.engine.context.ResolvedInterrupt``). (Kept short: psycopg
# parses a statement longer than 4096 characters again at every execution.)
_INTERRUPT_KEYS = (
    "id",
    "name",
    "schema_name",
    "schema_version",
    "decision",
    "resume_input",
    "resolved_by",
    # What the answer is bound to, compared again where the step acts.
    "evidence_hash",
    "evidence_canon",
    "scope",
    "policy_version",
)


def _claimed_from(rows: Sequence[Any]) -> ClaimedRun:
    """The claim's rows (one per answer given at the checkpoint, at least one) as objects.

    They are not attached to a session, as the long way's are not once its transaction ends:
    what follows only reads them and writes by compare-and-set on their values. The answers
    carry only the fields a step is told of them (``_INTERRUPT_KEYS``).
    """
    first = rows[0]
    run = from_row(Run, first)
    at = len(column_keys(Run))
    claimed_from = first[at]
    checkpoint = from_row(Checkpoint, first, at + 1)
    at += 1 + len(column_keys(Checkpoint))
    answered = [
        loaded(
            Interrupt, dict(zip(_INTERRUPT_KEYS, row[at : at + len(_INTERRUPT_KEYS)], strict=True))
        )
        for row in rows
        if row[at] is not None
    ]
    return ClaimedRun(
        run=run,
        checkpoint=checkpoint,
        answered=answered,
        unsettled=bool(first[-1]),
        resuming=claimed_from == RunState.RESUMING.value,
    )


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
        _raise_lost_race(session, run, fence_epoch)
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


def _raise_lost_race(session: Scope, run: Run, fence_epoch: int | None) -> NoReturn:
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


def claim(
    session: Session,
    run_id: str,
    *,
    owner: str,
    lease_seconds: float,
    facts: Sequence[tuple[EventKind, Any]] = (),
    writes: Sequence[Write] = (),
    **fields: Any,
) -> Run | None:
    """Take the run with a fresh lease and fencing epoch, or None if it is not claimable.

    A duplicate delivery, a run already owned or a finished run all end here as None.
    """
    run = session.get(Run, run_id)
    if run is None or run.state not in CLAIMABLE:
        return None
    now = utcnow()
    if run.not_before is not None and run.not_before > now:
        return None
    try:
        return move(
            session,
            run,
            EventKind.CLAIM,
            actor=f"worker:{owner}",
            detail={"epoch": run.lease_epoch + 1, "step": run.next_step},
            lease_owner=owner,
            lease_epoch=run.lease_epoch + 1,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            step_executions=run.step_executions + 1,
            not_before=None,
            facts=facts,
            writes=writes,
            **fields,
        )
    except StaleStateError:
        # Another delivery claimed it first; drop what this attempt wrote with its update.
        session.rollback()
        return None


def assert_owner(session: Scope, run_id: str, epoch: int) -> None:
    """Fence a write that is not a transition: the run must still be running under ``epoch``.

    On PostgreSQL the update also locks the run row until the caller's transaction ends,
    so a reclaim cannot slip in between this check and the caller's commit.
    """
    params = {"run_id": run_id, "epoch": epoch, "now": utcnow()}
    if dialect(session).run(session, RUN_ASSERT_OWNER, (), params).rowcount != 1:
        raise FencedError(run_id=run_id, epoch=epoch)


@named("run.assert_owner")
def RUN_ASSERT_OWNER(d: Dialect) -> Any:
    """Touch a run only if it still runs under an epoch, holding its row until commit
    (``assert_owner``: an effect's outcomes recorded apart from the step's commit)."""
    return (
        update(RUNS)
        .where(
            RUNS.c.id == bindparam("run_id"),
            RUNS.c.lease_epoch == bindparam("epoch"),
            RUNS.c.state == RunState.RUNNING,
        )
        .values(updated_at=bindparam("now", type_=RUNS.c.updated_at.type))
    )


def renew_lease(session: Scope, run_id: str, *, epoch: int, expires_at: datetime) -> bool:
    """Extend the lease held at ``epoch``; False if another owner took the run meanwhile."""
    renewal = lease_renewal(run_id, epoch=epoch, expires_at=expires_at)
    return bool(dialect(session).execute(session, renewal).rowcount == 1)


@named("run.renew_lease", ride=True)
def RUN_RENEW_LEASE(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Extend the lease a running run is held under at an epoch (``renew_lease``: the lease
    keeper; riding along an effect's intent, ``lease_renewal``)."""
    return (
        only_if(update(RUNS), guard)
        .where(
            RUNS.c.id == bindparam(prefix + "renewed_run"),
            RUNS.c.lease_epoch == bindparam(prefix + "held_epoch"),
            RUNS.c.state == RunState.RUNNING,
        )
        .values(
            lease_expires_at=bindparam(prefix + "renewed_until", type_=RUNS.c.lease_expires_at.type)
        )
    )


def lease_renewal(run_id: str, *, epoch: int, expires_at: datetime) -> Write:
    """The lease renewal of ``renew_lease``, to go with another write of the same owner."""
    params = {"renewed_run": run_id, "held_epoch": epoch, "renewed_until": expires_at}
    return Write(RUN_RENEW_LEASE, (), params)


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


def latest_checkpoint(session: Session, run: Run) -> Checkpoint:
    params = {"run_id": run.id, "seq": run.checkpoint_seq}
    checkpoint: Checkpoint = session.execute(
        dialect(session).built(CHECKPOINT_LATEST), params
    ).scalar_one()
    return checkpoint


@named("checkpoint.latest")
def CHECKPOINT_LATEST(d: Dialect) -> Any:
    """Read a run's checkpoint of one sequence, its latest (``latest_checkpoint``: a run's
    view for operators and the API)."""
    return select(Checkpoint).where(
        Checkpoint.run_id == bindparam("run_id"), Checkpoint.seq == bindparam("seq")
    )


def get_checkpoint(session: Session, checkpoint_id: str) -> Checkpoint | None:
    return session.get(Checkpoint, checkpoint_id)


def new_checkpoint(
    run: Run,
    *,
    step: str | None,
    next_step: str | None,
    state: Any,
    budget_consumed: float,
    effects: list[str],
    epoch: int,
    remembered: dict[str, Any] | None = None,
    started_at: datetime | None = None,
) -> Checkpoint:
    """The checkpoint following the run's latest; the caller adds it with the transition."""
    return loaded(
        Checkpoint,
        {
            "id": new_id(),
            "run_id": run.id,
            "seq": run.checkpoint_seq + 1,
            "step": step,
            "next_step": next_step,
            "state": state,
            "budget_consumed": budget_consumed,
            "effects": effects,
            "epoch": epoch,
            "created_at": utcnow(),
            "remembered": remembered,
            "started_at": started_at,
        },
    )


def remembered_write(checkpoint_id: str, remembered: dict[str, Any]) -> Write:
    """The UPDATE that keeps a step's remembered values on its checkpoint (``ctx.remember``).

    The one change a checkpoint takes after its insert: values the step computed there for
    the first time, added before it waits, so its next execution at that checkpoint (after
    the answer) reads them instead of computing them again. ``remembered`` holds the earlier
    values too, unchanged. Rides along the run's suspend.
    """

    return Write(CHECKPOINT_REMEMBER, (), {"kept_at": checkpoint_id, "kept": remembered})


@named("checkpoint.remember", ride=True)
def CHECKPOINT_REMEMBER(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Keep a step's remembered values on its checkpoint, riding along the run's suspend
    (``remembered_write``: ``ctx.remember`` before the step waits)."""
    keep = update(CHECKPOINTS).where(CHECKPOINTS.c.id == bindparam(prefix + "kept_at"))
    return only_if(keep, guard).values(
        remembered=bindparam(prefix + "kept", type_=CHECKPOINTS.c.remembered.type)
    )


def checkpoint_insert(session: Scope, checkpoint: Checkpoint) -> Write:
    """The INSERT appending ``checkpoint``, to go with the transition that commits it.

    It writes nothing when the sequence is taken: only when another owner committed it first,
    and then that transition's compare-and-set fails too, and says why.
    """
    values = {column: getattr(checkpoint, column) for column in CHECKPOINT_COLUMNS}
    return Write(CHECKPOINT_INSERT, (), values)


@named("checkpoint.insert", ride=True)
def CHECKPOINT_INSERT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Append a checkpoint unless its sequence is taken, riding along the move that commits
    it (``checkpoint_insert``: a step's commit, a run's insert, a migration)."""
    statement = d.insert_unless_present(CHECKPOINTS, "run_id", "seq")
    return insert_row(statement, CHECKPOINTS, CHECKPOINT_COLUMNS, prefix, guard)


# --- recovery (the reaper) ---------------------------------------------------------------------


def expired_leases(session: Session, now: datetime, batch: int) -> tuple[list[Run], dict[str, str]]:
    """Running runs whose owner stopped renewing, oldest first, and the ids of those that could
    not be read, with why (``readable_rows``); rows others hold are skipped."""
    query = dialect(session).built(RUN_EXPIRED_LEASES)
    return readable_rows(session, query, {"now": now, "batch": batch})


def _at(name: str) -> Any:
    """A timestamp parameter (aware UTC, as the columns hold them)."""
    return bindparam(name, type_=RUNS.c.updated_at.type)


@named("run.expired_leases")
def RUN_EXPIRED_LEASES(d: Dialect) -> Any:
    """Select a batch of running runs whose lease expired, oldest first, skipping rows others
    hold (``expired_leases``: the reaper, to requeue them)."""
    query = (
        select(Run)
        .where(Run.state == RunState.RUNNING.value, Run.lease_expires_at < _at("now"))
        .order_by(Run.lease_expires_at)
        .limit(bindparam("batch", type_=Integer))
    )
    return d.lock_or_skip(query)


def held_by(session: Session, run_id: str, owner: str) -> Run | None:
    """``run_id``, locked, if it is running under ``owner``'s lease (whatever its expiry)."""
    params = {"run_id": run_id, "owner": owner}
    found: Run | None = session.execute(
        dialect(session).built(RUN_HELD_BY), params
    ).scalar_one_or_none()
    return found


@named("run.held_by")
def RUN_HELD_BY(d: Dialect) -> Any:
    """Read and lock a run if it is running under an owner's lease (``held_by``: the worker's
    main process requeues the run of a pool child it saw die)."""
    query = select(Run).where(
        Run.id == bindparam("run_id"),
        Run.state == RunState.RUNNING.value,
        Run.lease_owner == bindparam("owner"),
    )
    return d.lock(query)


def unclaimed(
    session: Session, *, now: datetime, first_wait: float, longest_wait: float, batch: int
) -> list[tuple[str, str, int, str, str | None]]:
    """``(id, state, version, flow, next step)`` of claimable runs due to be published again.

    A run is due ``first_wait`` seconds after its dispatch; each republish then waits as long
    as the run had gone unclaimed when it was made (its dispatch less its last transition,
    ``updated_at``), so the waits double, up to ``longest_wait``. A backlog that only makes
    runs wait their turn then costs a duplicate message per doubling and one per
    ``longest_wait`` after, not one per ``first_wait``; a message truly lost is still sent
    again after ``first_wait``, and one a restarted broker lost after ``longest_wait`` at most.
    """
    params = {
        "now": now,
        "now_seconds": now.timestamp(),
        "first_cutoff": now - timedelta(seconds=first_wait),
        "longest_cutoff": now - timedelta(seconds=longest_wait),
        "batch": batch,
    }
    rows = session.execute(dialect(session).built(RUN_UNCLAIMED), params).all()
    return [
        (str(r.id), str(r.state), int(r.state_version), str(r.flow_name), r.next_step) for r in rows
    ]


@named("run.unclaimed")
def RUN_UNCLAIMED(d: Dialect) -> Any:
    """Select a batch of claimable runs whose dispatch is due again (waits doubling), oldest
    dispatch first, skipping rows others hold (``unclaimed``: the reaper, to republish)."""
    dispatched = Run.dispatched_at
    doubled = 2 * d.epoch_seconds(dispatched) - d.epoch_seconds(Run.updated_at) <= bindparam(
        "now_seconds", type_=Float
    )
    query = (
        select(Run.id, Run.state, Run.state_version, Run.flow_name, Run.next_step)
        .where(
            Run.state.in_(CLAIMABLE),
            or_(
                dispatched.is_(None),
                and_(
                    dispatched < _at("first_cutoff"),
                    or_(dispatched < _at("longest_cutoff"), doubled),
                ),
            ),
            or_(Run.not_before.is_(None), Run.not_before <= _at("now")),
        )
        .order_by(dispatched)
        .limit(bindparam("batch", type_=Integer))
    )
    return d.lock_or_skip(query)


def forget_dispatch(session: Session, run_ids: Collection[str], *, at: datetime) -> None:
    """The republishes of ``run_ids`` made ``at`` failed: due again at the reaper's next pass.

    Without this a publish refused by a broker that is down would count as one made, and the
    run would wait out its doubled wait after the broker is back. Only rows still carrying
    that dispatch change.
    """
    params = {"run_ids": list(run_ids), "at": at}
    session.execute(dialect(session).built(RUN_FORGET_DISPATCH), params)


@named("run.forget_dispatch")
def RUN_FORGET_DISPATCH(d: Dialect) -> Any:
    """Clear the dispatch of runs still carrying one made at a moment (``forget_dispatch``:
    the reaper, when the broker refused its republishes)."""
    return (
        update(RUNS)
        .where(
            RUNS.c.id.in_(bindparam("run_ids", expanding=True)),
            RUNS.c.dispatched_at == _at("at"),
        )
        .values(dispatched_at=None)
    )


def mark_redispatched(
    session: Session, run_id: str, *, state_version: int, cutoff: datetime, now: datetime
) -> bool:
    """Record a republish of an unclaimed run, only if nobody moved or republished it since.

    The reaper publishes only when this returns True, so two reapers never both republish.
    """
    params = {"run_id": run_id, "seen_version": state_version, "cutoff": cutoff, "now": now}
    result = session.execute(dialect(session).built(RUN_MARK_REDISPATCHED), params)
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


@named("run.mark_redispatched")
def RUN_MARK_REDISPATCHED(d: Dialect) -> Any:
    """Record a republish of a claimable run by compare-and-set on its version and its last
    dispatch (``mark_redispatched``: the reaper, so that two reapers never both republish)."""
    return (
        update(RUNS)
        .where(
            RUNS.c.id == bindparam("run_id"),
            RUNS.c.state_version == bindparam("seen_version"),
            RUNS.c.state.in_(CLAIMABLE),
            (RUNS.c.dispatched_at.is_(None)) | (RUNS.c.dispatched_at < _at("cutoff")),
        )
        .values(dispatched_at=_at("now"))
    )
