"""The resume attempts store: every attempt to answer an interrupt, and what the resume gateway
reads and locks to decide one (the actor, the attempt by which it claimed a key, the interrupt)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import Select, Table, bindparam, exists, func, insert, literal_column, select
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.actors import ACTORS
from models.db import dialect, utcnow
from models.dialects import Dialect
from models.interrupts import INTERRUPTS, PENDING
from models.redaction import redacted_row
from models.runs import RUNS
from models.scope import Scope
from models.statements import Write, insert_row, named, only_if
from models.tables import Actor, Interrupt, ResumeAttempt, Run, from_row

ATTEMPTS: Table = ResumeAttempt.__table__  # type: ignore[assignment]
ATTEMPT_ID = list(ATTEMPTS.c.keys()).index("id")


def original_attempt(session: Session, actor_id: str, key: str) -> ResumeAttempt | None:
    """The attempt by which ``actor_id`` claimed idempotency key ``key``, if any."""
    params = {"by_actor": actor_id, "by_key": key}
    found = dialect(session).run(session, ATTEMPT_ORIGINAL, (), params)
    row = found.first()
    return None if row is None else from_row(ResumeAttempt, row)


def actor_and_original(
    session: Session, actor_id: str, key: str
) -> tuple[Actor | None, ResumeAttempt | None]:
    """The actor row (locked for share until commit, as ``get_actor(for_decision=True)``) and
    the attempt by which it claimed idempotency key ``key``, if any, in one round trip.

    A resume reads both before it decides anything; the attempt counts only once the actor
    is authenticated (the caller decides in that order).
    """
    params = {"by_actor": actor_id, "by_key": key}
    row = dialect(session).run(session, ACTOR_WITH_ORIGINAL, (), params).first()
    if row is None:
        return None, None
    actor = from_row(Actor, row)
    # The unique index on (actor_id, original_key) leaves one attempt at most; with none, the
    # outer join fills its columns with NULL, its id (never NULL in a row) among them.
    found = row[len(ACTORS.c) :]
    original = from_row(ResumeAttempt, found) if found[ATTEMPT_ID] is not None else None
    return actor, original


def answer_context(
    scope: Scope, actor_id: str, key: str, interrupt_id: str
) -> tuple[Actor, bool, Interrupt, Run] | None:
    """What an answer is decided on, in one round trip and without a lock: the actor, whether
    it used idempotency key ``key`` before, the interrupt and its run. None when the actor or
    the interrupt is not there.

    For an answer accepted at once (``worker.gateway.at_once``), whose write then takes the
    locks and checks again what the decision read (``answerable_write``).
    """
    params = {"by_actor": actor_id, "by_key": key, "answered_interrupt": interrupt_id}
    row = dialect(scope).run(scope, ANSWER_CONTEXT, (), params).first()
    if row is None:
        return None
    interrupt_at = len(ACTORS.c) + 1
    return (
        from_row(Actor, row),
        row[len(ACTORS.c)] is not None,
        from_row(Interrupt, row, interrupt_at),
        from_row(Run, row, interrupt_at + len(INTERRUPTS.c)),
    )


@named("interrupt.answer_context")
def ANSWER_CONTEXT(d: Dialect) -> Any:
    """Read an actor, the id of the attempt by which it claimed an idempotency key (if any),
    an interrupt and its run, without a lock (``answer_context``: the resume gateway's one
    read for an answer it may accept at once)."""
    return (
        select(*ACTORS.c, ATTEMPTS.c.id, *INTERRUPTS.c, *RUNS.c)
        .select_from(ACTORS)
        .outerjoin(ATTEMPTS, _claimed_key(ACTORS.c.id))
        .join(INTERRUPTS, INTERRUPTS.c.id == bindparam("answered_interrupt"))
        .join(RUNS, RUNS.c.id == INTERRUPTS.c.run_id)
        .where(ACTORS.c.id == bindparam("by_actor"))
    )


def answerable_write(interrupt: Interrupt, actor: Actor) -> Write:
    """The guard of an answer accepted at once, at the head of its one statement: the
    interrupt still pending, locked, and ``actor`` still as it was authenticated (active,
    the same credential, kind and roles), locked for share, as the gateway's transaction
    holds them from its first read (``models.runs.move_recorded``'s ``given``)."""
    params = {
        "interrupt": interrupt.id,
        "actor": actor.id,
        "credential_hash": actor.credential_hash,
        "kind": actor.kind,
        "roles": actor.roles,
    }
    return Write(INTERRUPT_ANSWERABLE, (), params)


@named("interrupt.answerable", ride=True)
def INTERRUPT_ANSWERABLE(d: Dialect, prefix: str, guard: FromClause | None) -> Any:
    """Lock an interrupt if it is still pending and its answering actor is still as it was
    authenticated (active, the same credential, kind and roles; locked for share, so that a
    revoke waits), returning its id (``answerable_write``: the head of an answer accepted
    at once, which the run's move is guarded on)."""
    unchanged: Select[Any] = select(literal_column("1")).where(
        ACTORS.c.id == bindparam(prefix + "actor"),
        ACTORS.c.revoked_at.is_(None),
        ACTORS.c.credential_hash == bindparam(prefix + "credential_hash"),
        ACTORS.c.kind == bindparam(prefix + "kind"),
        ACTORS.c.roles == bindparam(prefix + "roles", type_=ACTORS.c.roles.type),
    )
    pending = select(INTERRUPTS.c.id).where(
        INTERRUPTS.c.id == bindparam(prefix + "interrupt"),
        INTERRUPTS.c.status == PENDING,
        exists(d.lock_shared(unchanged)),
    )
    return d.lock(only_if(pending, guard), of=INTERRUPTS)


@named("actor.with_original_attempt")
def ACTOR_WITH_ORIGINAL(d: Dialect) -> Any:
    """Read an actor, locked for share until commit, and the attempt by which it claimed an
    idempotency key, if any (``actor_and_original``: the resume gateway's first read)."""
    query = (
        select(*ACTORS.c, *ATTEMPTS.c)
        .select_from(ACTORS)
        .outerjoin(ATTEMPTS, _claimed_key(ACTORS.c.id))
        .where(ACTORS.c.id == bindparam("by_actor"))
    )
    return d.lock_shared(query, of=ACTORS)


@named("attempt.original")
def ATTEMPT_ORIGINAL(d: Dialect) -> Any:
    """Read the attempt by which an actor claimed an idempotency key (``original_attempt``:
    the gateway, after losing the race for that key, answers from the attempt that won)."""
    return select(*ATTEMPTS.c).where(_claimed_key(bindparam("by_actor")))


def _claimed_key(actor_id: Any) -> Any:
    """The attempt by which ``actor_id`` claimed key ``by_key`` (one at most: the unique index
    on ``(actor_id, original_key)``)."""
    return (ATTEMPTS.c.actor_id == actor_id) & (ATTEMPTS.c.original_key == bindparam("by_key"))


def insert_attempt(session: Session, **values: Any) -> int:
    """Record one resume attempt; returns its id."""
    return int(dialect(session).execute(session, attempt_write(values)).scalar_one())


def attempt_write(values: dict[str, Any]) -> Write:
    """The INSERT of one resume attempt, returning its id (guarded: one per row of its
    guard)."""
    values = redacted_row({"at": utcnow(), **values})
    return Write(ATTEMPT_INSERT, (tuple(sorted(values)),), values)


@named(
    "attempt.insert",
    ride=True,
    shapes=(
        (
            (
                "actor_id",
                "at",
                "idempotency_key",
                "interrupt_id",
                "original_key",
                "outcome",
                "payload",
                "payload_hash",
                "reason",
                "run_id",
            ),
        ),
    ),
)
def ATTEMPT_INSERT(
    d: Dialect, prefix: str, guard: FromClause | None, columns: tuple[str, ...]
) -> UpdateBase:
    """Record a resume attempt, returning its id (``attempt_write``: an accepted resume,
    guarded on the interrupt's move; ``insert_attempt``: every refused one)."""
    return insert_row(insert(ATTEMPTS), ATTEMPTS, columns, prefix, guard).returning(ATTEMPTS.c.id)


def list_attempts(
    session: Session,
    *,
    interrupt_id: str | None = None,
    run_id: str | None = None,
    outcome: str | None = None,
    before: int | None = None,
    limit: int = 1000,
) -> list[ResumeAttempt]:
    """Attempts, newest first; ``before`` (an attempt id) is the cursor of the next page."""
    query = select(ResumeAttempt).order_by(ResumeAttempt.id.desc()).limit(limit)
    if interrupt_id is not None:
        query = query.where(ResumeAttempt.interrupt_id == interrupt_id)
    if run_id is not None:
        query = query.where(ResumeAttempt.run_id == run_id)
    if outcome is not None:
        query = query.where(ResumeAttempt.outcome == outcome)
    if before is not None:
        query = query.where(ResumeAttempt.id < before)
    return list(session.execute(query).scalars())


def count_attempts(
    session: Session, *, run_id: str | None = None, interrupt_id: str | None = None
) -> dict[str, int]:
    """How many attempts there were, by outcome."""
    query = select(ResumeAttempt.outcome, func.count()).group_by(ResumeAttempt.outcome)
    if run_id is not None:
        query = query.where(ResumeAttempt.run_id == run_id)
    if interrupt_id is not None:
        query = query.where(ResumeAttempt.interrupt_id == interrupt_id)
    return {outcome: int(n) for outcome, n in session.execute(query).all()}
