"""The interrupts store: the only code that reads or writes interrupts.

An interrupt's status moves only through the compare-and-set of ``transition_write`` (on the
status the lifecycle in ``statemachine.interrupts`` allows): on its own in ``transition``, or
riding along the run's move of an accepted resume, with the attempt that made it
(``models.runs.move_recorded``); or all of a run's pending interrupts at once, by one
set-based UPDATE on that same status (``close_pending``). "A newer interrupt asks in place of
this one" exists once, in ``supersede``, for escalations and renewed reviews alike.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Integer, Table, bindparam, func, insert, or_, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models import notifications as notification_store
from models.actors import ACTORS
from models.contracts import InterruptDecl
from models.db import dialect, readable_rows, utcnow
from models.dialects import Dialect
from models.enums import EventKind, InterruptStatus
from models.redaction import redacted_row
from models.runs import RUNS
from models.settings import get_settings, notify_due_in
from models.statements import Write, insert_row, named, only_if, row_values
from models.storable import new_id, storable_id
from models.tables import Interrupt, Run, committed, from_row, loaded
from statemachine import interrupt_destination, interrupt_sources

INTERRUPTS: Table = Interrupt.__table__  # type: ignore[assignment]
PENDING = InterruptStatus.PENDING.value
# Who closes the asks of a group still open when its need is met.
GROUP_ACTOR = "system:ask-group"
INTERRUPT_COLUMNS = tuple(column.key for column in INTERRUPTS.columns)
# What a superseding interrupt does not take over from the one it replaces.
NOT_INHERITED = frozenset(
    {
        "id",
        "status",
        "supersedes",
        "superseded_by",
        "decision",
        "resume_input",
        "resolved_by",
        "created_at",
        "resolved_at",
        "put_off_until",
    }
)


def new_interrupt(
    run: Run, decl: InterruptDecl, *, step: str, checkpoint_id: str, state_version: int
) -> tuple[Interrupt, Write]:
    """The durable interrupt of a run moving to ``waiting`` (at ``state_version``), and the
    INSERT that writes it with the run's ``suspend`` (see ``interrupt_event``)."""
    now = utcnow()
    # Never added to a session (the INSERT rides the run's move): built as a loaded row is,
    # without the mapped constructor's attribute events (about 20 µs for these columns).
    interrupt = loaded(
        Interrupt,
        {
            **redacted_row(decl.model_dump(exclude={"expires_in"})),
            "id": new_id(),
            "run_id": run.id,
            "status": PENDING,
            "step": step,
            "checkpoint_id": checkpoint_id,
            "state_version": state_version,
            "flow_version": run.flow_version,
            "deadline": now + timedelta(seconds=decl.expires_in),
            "escalation_level": 0,
            "created_at": now,
        },
    )
    return interrupt, insert_write(interrupt)


def insert_write(interrupt: Interrupt) -> Write:
    """The INSERT of ``interrupt`` (not yet written), to ride along another statement."""
    return Write(INTERRUPT_INSERT, (), {c: getattr(interrupt, c) for c in INTERRUPT_COLUMNS})


@named("interrupt.insert", ride=True)
def INTERRUPT_INSERT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Record a new pending interrupt, riding along the run's ``suspend`` (``new_interrupt``:
    a step that asks) or the old interrupt's ``supersede`` (an escalation, a renewed review)."""
    return insert_row(insert(INTERRUPTS), INTERRUPTS, INTERRUPT_COLUMNS, prefix, guard)


def interrupt_event(interrupt_id: str, decl: InterruptDecl) -> tuple[EventKind, Any]:
    detail = {"interrupt_id": interrupt_id, "name": decl.name, "kind": decl.kind}
    if decl.supersedes:
        # A renewed review on a newer flow version names the answer it asks again.
        detail["renews"] = decl.supersedes
    return EventKind.INTERRUPT, detail


def transition(session: Session, interrupt: Interrupt, trigger: str, **values: Any) -> bool:
    """Move ``interrupt`` by ``trigger`` if it is still where the lifecycle allows it from.

    False when another process moved it first (nothing is written then).
    """
    move, values = transition_write(interrupt, trigger, **values)
    # (Counted by its rows: SQLite's count of an UPDATE ... RETURNING is not final before.)
    if len(dialect(session).execute(session, move).all()) != 1:
        return False
    moved(interrupt, values)
    return True


def transition_write(
    interrupt: Interrupt, trigger: str, **values: Any
) -> tuple[Write, dict[str, Any]]:
    """The compare-and-set UPDATE that moves ``interrupt`` by ``trigger``, returning its id
    (riding along another statement, guarded on its rows), and the values it sets: ``moved``
    gives them to ``interrupt`` once it is written."""
    sources = tuple(s.value for s in interrupt_sources(trigger))
    values = redacted_row({**values, "status": interrupt_destination(trigger, sources[0]).value})
    values.setdefault("resolved_at", utcnow())
    params = {f"to_{k}": v for k, v in values.items()}
    params["moved_interrupt"] = interrupt.id
    return Write(INTERRUPT_MOVE, (sources, tuple(sorted(values))), params), values


@named(
    "interrupt.move",
    ride=True,
    shapes=((("pending",), ("decision", "resolved_at", "resolved_by", "resume_input", "status")),),
)
def INTERRUPT_MOVE(
    d: Dialect,
    prefix: str,
    guard: FromClause | None,
    sources: tuple[str, ...],
    columns: tuple[str, ...],
) -> UpdateBase:
    """Move an interrupt by compare-and-set on its status (one of ``sources``), setting
    ``columns``, returning its id (``transition_write``: an accepted resume, riding along the
    run's move; ``transition``: a sweep's expiry or escalation, a renewed review)."""
    update_it = update(INTERRUPTS).where(
        INTERRUPTS.c.id == bindparam(prefix + "moved_interrupt"),
        INTERRUPTS.c.status.in_(sources),
    )
    return (
        only_if(update_it, guard)
        .values(row_values(INTERRUPTS, columns, prefix + "to_"))
        .returning(INTERRUPTS.c.id)
    )


def answer_renewed_write(answered_id: str, renewed_id: str) -> Write:
    """The UPDATE that marks an answer as renewed by ``renewed_id`` (a new interrupt asking
    again where the step acts, the evidence having changed): it keeps its status and answer
    (history), and no claim reads it as an answer any more. Rides along the run's suspend."""

    params = {"renewed_answer": answered_id, "renewed_by": renewed_id}
    return Write(INTERRUPT_ANSWER_RENEWED, (), params)


@named("interrupt.answer_renewed", ride=True)
def INTERRUPT_ANSWER_RENEWED(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Mark an answer as renewed by a new interrupt, keeping its status and answer, riding
    along the run's suspend (``answer_renewed_write``: a step whose evidence or scope changed
    since the answer)."""
    mark = update(INTERRUPTS).where(
        INTERRUPTS.c.id == bindparam(prefix + "renewed_answer"),
        INTERRUPTS.c.superseded_by.is_(None),
    )
    return only_if(mark, guard).values(superseded_by=bindparam(prefix + "renewed_by"))


def moved(interrupt: Interrupt, values: dict[str, Any]) -> None:
    """``interrupt`` as its ``transition_write`` left it in the database."""
    committed(interrupt, values)


def supersede(
    session: Session,
    old: Interrupt,
    renewed: Interrupt,
    *,
    resolved_by: str,
    writes: Sequence[Write] = (),
) -> bool:
    """``renewed`` (a ``successor`` of ``old``) asks in place of ``old``, which becomes
    ``superseded``; ``writes`` (the run's event) go with them. False, and nothing written, if
    ``old`` was no longer pending.

    One statement on PostgreSQL: the compare-and-set on ``old``, the new row, the
    notifications owed of it (whoever was to hear of the old one hears of its successor) and
    ``writes`` riding along, guarded on the compare-and-set."""
    move, values = transition_write(
        old, "supersede", superseded_by=renewed.id, resolved_by=resolved_by
    )
    now = utcnow()
    due_at = now + timedelta(seconds=notify_due_in(get_settings()))
    riding = [
        insert_write(renewed),
        notification_store.successor_write(old.id, renewed.id, now=now, due_at=due_at),
        *writes,
    ]
    # (Counted by its rows: SQLite's count of an UPDATE ... RETURNING is not final before.)
    if len(dialect(session).execute_with(session, move, riding).all()) != 1:
        return False
    moved(old, values)
    return True


def close_pending(session: Session, run_id: str, trigger: str, **values: Any) -> list[str]:
    """Move every interrupt of ``run_id`` still pending by ``trigger`` (``cancel``), in one
    set-based UPDATE whose compare-and-set is the status; the ids it moved.

    Whatever the caller read before, this statement looks again: on PostgreSQL (READ
    COMMITTED) its snapshot is taken when it starts, so it also finds an interrupt committed
    since (the successor of an escalation or a renewed review), and a row another transaction
    holds is waited on, then matched again as that transaction left it.
    """
    values = {**values, "status": interrupt_destination(trigger, PENDING).value}
    values.setdefault("resolved_at", utcnow())
    query = dialect(session).built(INTERRUPT_CLOSE_PENDING, (tuple(sorted(values)),))
    params = {f"to_{k}": v for k, v in values.items()}
    # (Counted by its rows: SQLite's count of an UPDATE ... RETURNING is not final before.)
    return list(session.execute(query, {**params, "of_run": run_id}).scalars().all())


@named("interrupt.close_pending", shapes=((("resolved_at", "resolved_by", "status"),),))
def INTERRUPT_CLOSE_PENDING(d: Dialect, columns: tuple[str, ...]) -> Any:
    """Move every pending interrupt of a run at once, setting ``columns``, returning their
    ids (``close_pending``: a run's cancel)."""
    return (
        update(INTERRUPTS)
        .where(INTERRUPTS.c.run_id == bindparam("of_run"), INTERRUPTS.c.status == PENDING)
        .values(row_values(INTERRUPTS, columns, "to_"))
        .returning(INTERRUPTS.c.id)
    )


def ask_again(session: Session, answered: Interrupt, **changes: Any) -> Interrupt:
    """A new pending interrupt asking what ``answered`` asked, on a newer flow version.

    ``answered`` keeps its answer and status (it is history); the new one points at it
    (``supersedes``) and is resolved with the same answer, or stays pending for a renewed
    review. Its deadline keeps the old one's duration unless ``changes`` sets one.
    """
    asked = successor(answered, **changes)
    session.add(asked)
    session.flush()
    return asked


def successor(old: Interrupt, **changes: Any) -> Interrupt:
    """A new pending interrupt asking what ``old`` asks: everything but ``changes`` and its own
    identity inherited; its deadline keeps the old one's duration unless ``changes`` sets one.
    Not written: ``supersede`` writes it."""
    now = utcnow()
    columns = {c: getattr(old, c) for c in INTERRUPTS.columns.keys() if c not in NOT_INHERITED}  # noqa: SIM118
    return Interrupt(
        **{
            **columns,
            "deadline": now + (old.deadline - old.created_at),
            **redacted_row(changes),
            "id": new_id(),
            "status": PENDING,
            "supersedes": old.id,
            "created_at": now,
        }
    )


def lock_with_run(session: Session, interrupt_id: str) -> tuple[Interrupt, Run] | None:
    """The interrupt, locked until commit, and its run, in one query."""
    params = {"locked_interrupt": interrupt_id}
    found = dialect(session).run(session, INTERRUPT_LOCK_WITH_RUN, (), params).first()
    if found is None:
        return None
    return from_row(Interrupt, found), from_row(Run, found, len(INTERRUPTS.c))


def group_counts(session: Session, interrupt: Interrupt) -> tuple[int, int]:
    """How many other asks of ``interrupt``'s group are answered (and still bind: not renewed)
    and how many are still open. Read with the run locked (``models.runs.lock_run``), so that
    answers racing for the group's last place are counted one after the other."""
    params = {
        "group_run": interrupt.run_id,
        "group_checkpoint": interrupt.checkpoint_id,
        "group_name": interrupt.ask_group,
        "not_interrupt": interrupt.id,
    }
    row = session.execute(dialect(session).built(INTERRUPT_GROUP_COUNTS), params).one()
    return int(row[0]), int(row[1])


@named("interrupt.group_counts")
def INTERRUPT_GROUP_COUNTS(d: Dialect) -> Any:
    """Count the other asks of an interrupt's group answered (and not renewed) and still open
    (``group_counts``: the gateway and the sweep, the run locked, to tell whether an answer
    meets the group's need)."""
    answered = (INTERRUPTS.c.status == InterruptStatus.RESOLVED.value) & (
        INTERRUPTS.c.superseded_by.is_(None)
    )
    return select(
        func.count().filter(answered), func.count().filter(INTERRUPTS.c.status == PENDING)
    ).where(
        INTERRUPTS.c.run_id == bindparam("group_run"),
        INTERRUPTS.c.checkpoint_id == bindparam("group_checkpoint"),
        INTERRUPTS.c.ask_group == bindparam("group_name"),
        INTERRUPTS.c.id != bindparam("not_interrupt"),
    )


def close_group_write(run_id: str, checkpoint_id: str, group: str) -> Write:
    """The UPDATE closing the asks of a group still open once its need is met: ``superseded``
    by the group, by its compare-and-set on the status (a late answer to one is stale)."""

    params = {
        "group_run": run_id,
        "group_checkpoint": checkpoint_id,
        "group_name": group,
        "group_at": utcnow(),
    }
    return Write(INTERRUPT_CLOSE_GROUP, (), params)


@named("interrupt.close_group", ride=True)
def INTERRUPT_CLOSE_GROUP(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Supersede the asks of a group still open once its need is met, by compare-and-set on
    their status, returning their ids (``close_group_write``: the resumed step's commit;
    ``close_group``: the gateway, after its commit)."""
    close = update(INTERRUPTS).where(
        INTERRUPTS.c.run_id == bindparam(prefix + "group_run"),
        INTERRUPTS.c.checkpoint_id == bindparam(prefix + "group_checkpoint"),
        INTERRUPTS.c.ask_group == bindparam(prefix + "group_name"),
        INTERRUPTS.c.status == PENDING,
    )
    return (
        only_if(close, guard)
        .values(
            status=InterruptStatus.SUPERSEDED.value,
            resolved_by=GROUP_ACTOR,
            resolved_at=bindparam(prefix + "group_at", type_=INTERRUPTS.c.resolved_at.type),
        )
        .returning(INTERRUPTS.c.id)
    )


def close_group(session: Session, run_id: str, checkpoint_id: str, group: str) -> list[str]:
    """Close the group's open asks now; the ids closed."""
    write = close_group_write(run_id, checkpoint_id, group)
    return [row[0] for row in dialect(session).execute(session, write).all()]


def group_asks(session: Session, run_id: str, checkpoint_id: str) -> list[Interrupt]:
    """The asks of every ask group of a run at one checkpoint, oldest first."""
    params = {"run_id": run_id, "checkpoint_id": checkpoint_id}
    return list(session.execute(dialect(session).built(INTERRUPT_GROUP_ASKS), params).scalars())


@named("interrupt.group_asks")
def INTERRUPT_GROUP_ASKS(d: Dialect) -> Any:
    """Read the asks of every ask group of a run at one checkpoint, oldest first
    (``group_asks``: a run's view)."""
    return (
        select(Interrupt)
        .where(
            Interrupt.run_id == bindparam("run_id"),
            Interrupt.checkpoint_id == bindparam("checkpoint_id"),
            Interrupt.ask_group.is_not(None),
        )
        .order_by(Interrupt.created_at, Interrupt.name)
    )


@named("interrupt.lock_with_run")
def INTERRUPT_LOCK_WITH_RUN(d: Dialect) -> Any:
    """Read an interrupt, locked until commit, with its run (``lock_with_run``: the resume
    gateway, before it decides)."""
    query = (
        select(*INTERRUPTS.c, *RUNS.c)
        .join(RUNS, RUNS.c.id == INTERRUPTS.c.run_id)
        .where(INTERRUPTS.c.id == bindparam("locked_interrupt"))
    )
    return d.lock(query, of=INTERRUPTS)


def get(session: Session, interrupt_id: str) -> Interrupt | None:
    if not storable_id(interrupt_id):
        return None
    return session.get(Interrupt, interrupt_id)


def pending_of_run(session: Session, run_id: str, *, locked: bool = False) -> list[Interrupt]:
    """A run's pending interrupts, oldest first (locked: in the order resumes take them)."""
    query = dialect(session).built(INTERRUPT_PENDING_OF_RUN, (locked,))
    return list(session.execute(query, {"run_id": run_id}).scalars())


@named("interrupt.pending_of_run", shapes=((False,), (True,)))
def INTERRUPT_PENDING_OF_RUN(d: Dialect, locked: bool) -> Any:
    """Read a run's pending interrupts, oldest first; ``locked`` until commit, in the order
    resumes take them (``pending_of_run``: a cancel; a run's view)."""
    query = (
        select(Interrupt)
        .where(Interrupt.run_id == bindparam("run_id"), Interrupt.status == PENDING)
        .order_by(Interrupt.created_at)
    )
    return d.lock(query) if locked else query


def resolved_at(
    session: Session, run_id: str, checkpoint_id: str, *, name: str | None = None
) -> list[Interrupt]:
    """The answered interrupts of a run at one checkpoint (of one name, if given)."""
    query = dialect(session).built(INTERRUPT_ANSWERED_AT, (name is not None,))
    params = {"run_id": run_id, "checkpoint_id": checkpoint_id, "name": name}
    return list(session.execute(query, params).scalars())


@named("interrupt.answered_at", shapes=((False,), (True,)))
def INTERRUPT_ANSWERED_AT(d: Dialect, named_one: bool) -> Any:
    """Read a run's answered interrupts at one checkpoint (``named_one``: of one name)
    (``resolved_at``: ``ctx.effect``, the operator's findings on an unsettled effect)."""
    query = select(Interrupt).where(
        Interrupt.run_id == bindparam("run_id"),
        Interrupt.checkpoint_id == bindparam("checkpoint_id"),
        Interrupt.status == InterruptStatus.RESOLVED.value,
    )
    return query.where(Interrupt.name == bindparam("name")) if named_one else query


def due(session: Session, now: datetime, size: int) -> tuple[list[Interrupt], dict[str, str]]:
    """Due pending interrupts that no sweep put off past ``now``, oldest deadline first, read
    through the (status, deadline) index; and the ids of those that could not be read, each
    with why (``readable_rows``).

    Rows another sweeper (or a resume in the gateway) holds are theirs: skipped, never waited on.
    """
    query = dialect(session).built(INTERRUPT_DUE)
    return readable_rows(session, query, {"now": now, "size": size})


def _at(name: str) -> Any:
    """A timestamp parameter (aware UTC, as the columns hold them)."""
    return bindparam(name, type_=INTERRUPTS.c.deadline.type)


@named("interrupt.due")
def INTERRUPT_DUE(d: Dialect) -> Any:
    """Select a batch of pending interrupts past their deadline and not put off, oldest
    deadline first, through the (status, deadline) index, skipping rows others hold
    (``due``: the expiry sweep)."""
    query = (
        select(Interrupt)
        .where(
            Interrupt.status == PENDING,
            Interrupt.deadline <= _at("now"),
            or_(Interrupt.put_off_until.is_(None), Interrupt.put_off_until <= _at("now")),
        )
        .order_by(Interrupt.deadline)
        .limit(bindparam("size", type_=Integer))
    )
    return d.lock_or_skip(query)


def put_off(session: Session, interrupt_id: str, until: datetime) -> None:
    """No sweep looks at pending ``interrupt_id`` again before ``until``."""
    params = {"interrupt_id": interrupt_id, "until": until}
    session.execute(dialect(session).built(INTERRUPT_PUT_OFF), params)


@named("interrupt.put_off")
def INTERRUPT_PUT_OFF(d: Dialect) -> Any:
    """Keep sweeps off a pending interrupt until a moment (``put_off``: the sweep, for an
    interrupt whose policy cannot be applied now)."""
    return (
        update(INTERRUPTS)
        .where(INTERRUPTS.c.id == bindparam("interrupt_id"), INTERRUPTS.c.status == PENDING)
        .values(put_off_until=_at("until"))
    )


def bring_forward(session: Session, now: datetime) -> None:
    """Every pending interrupt a sweep put off past ``now`` is due again now."""
    session.execute(dialect(session).built(INTERRUPT_BRING_FORWARD), {"now": now})


@named("interrupt.bring_forward")
def INTERRUPT_BRING_FORWARD(d: Dialect) -> Any:
    """Make every pending interrupt put off past a moment due again (``bring_forward``:
    ``interlude sweep --now``)."""
    return (
        update(INTERRUPTS)
        .where(INTERRUPTS.c.status == PENDING, INTERRUPTS.c.put_off_until > _at("now"))
        .values(put_off_until=None)
    )


def list_rows(
    *,
    session: Session,
    run_id: str | None = None,
    status: InterruptStatus | None = None,
    kind: str | None = None,
    limit: int = 1000,
) -> list[Interrupt]:
    """Interrupts, oldest first: the operators' work queue."""
    query = select(Interrupt).order_by(Interrupt.created_at, Interrupt.id).limit(limit)
    if run_id is not None:
        query = query.where(Interrupt.run_id == run_id)
    if status is not None:
        query = query.where(Interrupt.status == status.value)
    if kind is not None:
        query = query.where(Interrupt.kind == kind)
    return list(session.execute(query).scalars())


def held_roles(session: Session) -> set[str]:
    """Every role some active (not revoked) actor holds: who could answer an interrupt.

    Read whole and matched here: roles are a JSON list, queried alike on neither database.
    """
    rows = session.execute(dialect(session).built(ACTOR_HELD_ROLES))
    return {role for (roles,) in rows for role in roles or [] if isinstance(role, str)}


@named("actor.held_roles")
def ACTOR_HELD_ROLES(d: Dialect) -> Any:
    """Read the roles of every active actor (``held_roles``: the expiry sweep, to escalate
    only to roles someone holds)."""
    return select(ACTORS.c.roles).where(ACTORS.c.revoked_at.is_(None))
