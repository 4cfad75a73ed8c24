"""SQL tables. Runs hold the lifecycle; checkpoints, events and resume attempts are append-only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from enum import Enum
from functools import cache
from typing import Any, TypeVar

from sqlalchemy import (
    Boolean,
    CheckConstraint,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, configure_mappers, mapped_column
from sqlalchemy.orm.attributes import instance_state
from sqlalchemy.orm.instrumentation import manager_of_class

from models.dialects import BigId, Json, Timestamp, enum_type, sql_values
from models.enums import (
    REPEATED_WORK,
    ActorKind,
    ContactChannel,
    EffectStatus,
    InterruptKind,
    InterruptStatus,
    NotificationStatus,
    ResumeOutcome,
    RunState,
)

NAMING = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


FORKED = text("forked_from IS NOT NULL")
KEYED = text("idempotency_key IS NOT NULL")
PENDING_ONLY = text(f"status = '{InterruptStatus.PENDING.value}'")
# The events that count as repeated work, as the index on them and the query that reads it both
# say it (word for word: SQLite uses a partial index only for a query that repeats its terms).
REPEATED_WORK_TRIGGERS = f"trigger IN ({', '.join(repr(kind.value) for kind in REPEATED_WORK)})"


def checked(enum: type[Enum], column: str) -> CheckConstraint:
    """The CHECK constraint that ``enum_type``'s domain stands for, on SQLite only."""
    constraint = CheckConstraint(f"{column} IN ({sql_values(enum)})", name=column)
    return constraint.ddl_if(dialect="sqlite")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING)


B = TypeVar("B", bound=Base)


def loaded(cls: type[B], values: Mapping[str, Any]) -> B:
    """An instance of ``cls`` holding ``values`` as if read from its row, in no session.

    As SQLAlchemy fills an object it loads: no history, no attribute events. The mapped
    constructor (``cls(**values)``) costs about 18 µs for a run, this 1 µs, and the step path
    makes a handful per step. ``values`` must be columns of ``cls``.
    """
    obj: B = manager_of_class(cls).new_instance()
    obj.__dict__.update(values)
    return obj


def committed(obj: Base, values: Mapping[str, Any]) -> None:
    """Set column ``values`` on ``obj`` as written and read back, with no history: what
    ``set_committed_value`` does for one attribute, for all of them at once (a run's move sets
    a dozen; one call each was a measurable part of a step). Columns only (no collections)."""
    state = instance_state(obj)
    state.dict.update(values)
    state._commit(state.dict, values.keys())


def from_row(cls: type[B], row: Sequence[Any], start: int = 0) -> B:
    """``loaded`` from a row holding all of ``cls``'s columns, in table order, at ``start``."""
    keys = column_keys(cls)
    return loaded(cls, dict(zip(keys, row[start : start + len(keys)], strict=True)))


@cache
def column_keys(cls: type[Base]) -> tuple[str, ...]:
    """The columns of ``cls``'s table, in order (asked once per class: the hot path asks)."""
    return tuple(cls.__table__.c.keys())


class Run(Base):
    __tablename__ = "runs"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    flow_name: Mapped[str] = mapped_column(String(200))
    flow_version: Mapped[int] = mapped_column(Integer)
    input: Mapped[Any] = mapped_column(Json)
    state: Mapped[str] = mapped_column(enum_type(RunState, 16, "runs", "state"))
    state_version: Mapped[int] = mapped_column(Integer, default=0)
    next_step: Mapped[str | None] = mapped_column(String(200))
    checkpoint_seq: Mapped[int] = mapped_column(Integer, default=0)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    started_by: Mapped[str | None] = mapped_column(String(200))
    lease_owner: Mapped[str | None] = mapped_column(String(200))
    lease_epoch: Mapped[int] = mapped_column(Integer, default=0)
    lease_expires_at: Mapped[datetime | None] = mapped_column(Timestamp())
    # Claims of the current step whose lease expired (bounded by the reaper).
    lost_leases: Mapped[int] = mapped_column(Integer, default=0)
    # Failed attempts of the current step (bounded by the step's retry limit).
    step_attempts: Mapped[int] = mapped_column(Integer, default=0)
    # Executions of the current step; more than one means repeated work.
    step_executions: Mapped[int] = mapped_column(Integer, default=0)
    budget_allowance: Mapped[float | None] = mapped_column(Float)
    budget_consumed: Mapped[float] = mapped_column(Float, default=0.0)
    pause_requested_by: Mapped[str | None] = mapped_column(String(200))
    # The run row is its own outbox: when a task for it was last published.
    dispatched_at: Mapped[datetime | None] = mapped_column(Timestamp())
    not_before: Mapped[datetime | None] = mapped_column(Timestamp())
    output: Mapped[Any | None] = mapped_column(Json)
    # A fork: the run it was started from, and the checkpoint of that run it started at.
    forked_from: Mapped[str | None] = mapped_column(String(32))
    forked_at: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    updated_at: Mapped[datetime] = mapped_column(Timestamp())
    finished_at: Mapped[datetime | None] = mapped_column(Timestamp())

    __table_args__ = (
        checked(RunState, "state"),
        Index(None, "state", "lease_expires_at"),
        Index(None, "flow_name", "state"),
        # Listings of runs, newest first (the console, GET /v1/runs, runs list): read in order.
        Index(None, "created_at"),
        # A run's forks. Only forks are indexed: a non-HOT write of a run (most are) adds an
        # entry to every index, NULL or not.
        Index(None, "forked_from", postgresql_where=FORKED, sqlite_where=FORKED),
        # One run per idempotency key. On PostgreSQL only keyed runs are in the index: a
        # non-HOT write of a run (most are) would otherwise add a NULL entry at every
        # transition of every run started without a key. SQLite keeps its UNIQUE constraint,
        # which it cannot drop without copying the table.
        UniqueConstraint("idempotency_key").ddl_if(dialect="sqlite"),
        Index(None, "idempotency_key", unique=True, postgresql_where=KEYED).ddl_if(
            dialect="postgresql"
        ),
    )


class Checkpoint(Base):
    __tablename__ = "checkpoints"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    seq: Mapped[int] = mapped_column(Integer)
    step: Mapped[str | None] = mapped_column(String(200))
    next_step: Mapped[str | None] = mapped_column(String(200))
    state: Mapped[Any] = mapped_column(Json)
    budget_consumed: Mapped[float] = mapped_column(Float, default=0.0)
    effects: Mapped[Any] = mapped_column(Json)
    epoch: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    # Values the step at this checkpoint computed once (``ctx.remember``): a model's proposal,
    # a read. Kept across the step's executions here, so that what was approved is acted on;
    # keys are only ever added, never changed.
    remembered: Mapped[Any | None] = mapped_column(Json)
    # When the step that committed this checkpoint started (its duration ends at created_at).
    started_at: Mapped[datetime | None] = mapped_column(Timestamp())

    __table_args__ = (UniqueConstraint("run_id", "seq"),)


class Event(Base):
    __tablename__ = "events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    at: Mapped[datetime] = mapped_column(Timestamp())
    actor: Mapped[str] = mapped_column(String(200))
    trigger: Mapped[str] = mapped_column(String(64))
    from_state: Mapped[str | None] = mapped_column(String(16))
    to_state: Mapped[str | None] = mapped_column(String(16))
    detail: Mapped[Any] = mapped_column(Json)

    # The repeated-work totals (``queries.repeated_work``) are the only reader by trigger: only
    # their kinds are indexed, not the eight or so other events of every run.
    __table_args__ = (
        Index(
            "ix_events_repeated_work",
            "trigger",
            postgresql_where=text(REPEATED_WORK_TRIGGERS),
            sqlite_where=text(REPEATED_WORK_TRIGGERS),
        ),
    )


class Interrupt(Base):
    __tablename__ = "interrupts"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    # (Looked up through the index on (run_id, checkpoint_id), which serves run_id alone.)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    kind: Mapped[str] = mapped_column(enum_type(InterruptKind, 16, "interrupts", "kind"))
    status: Mapped[str] = mapped_column(enum_type(InterruptStatus, 16, "interrupts", "status"))
    reason: Mapped[str] = mapped_column(Text, default="")
    step: Mapped[str] = mapped_column(String(200))
    checkpoint_id: Mapped[str] = mapped_column(String(32))
    state_version: Mapped[int] = mapped_column(Integer)
    flow_version: Mapped[int] = mapped_column(Integer)
    schema_name: Mapped[str] = mapped_column(String(200))
    schema_version: Mapped[int] = mapped_column(Integer)
    json_schema: Mapped[Any] = mapped_column(Json)
    roles: Mapped[Any] = mapped_column(Json)
    scope: Mapped[Any | None] = mapped_column(Json)
    evidence: Mapped[Any | None] = mapped_column(Json)
    evidence_hash: Mapped[str] = mapped_column(String(80))
    # How evidence_hash was computed: "rfc8785" (canonical JSON); NULL for interrupts recorded
    # before hashes followed RFC 8785, whose stored hash keeps validating as it was shown.
    evidence_canon: Mapped[str | None] = mapped_column(String(16))
    # The flow's approval policy version the interrupt was asked under (None: none declared);
    # an answer given under a policy the flow no longer honours is not applied.
    policy_version: Mapped[str | None] = mapped_column(String(64))
    # An ask of a group asked together by one step (``ctx.ask_all``), and how many of the
    # group's asks must be answered to release the run (NULL: a lone interrupt).
    ask_group: Mapped[str | None] = mapped_column(String(200))
    group_need: Mapped[int | None] = mapped_column(Integer)
    # The W3C traceparent of the step span that asked (tracing on): the answer links to it.
    trace_parent: Mapped[str | None] = mapped_column(String(64))
    separate_from_starter: Mapped[bool] = mapped_column(Boolean, default=False)
    deadline: Mapped[datetime] = mapped_column(Timestamp())
    # Set when a sweep could not apply its policy: no sweep looks at it again before then
    # (so that what waits past its deadline for a fix is not read at every sweep).
    put_off_until: Mapped[datetime | None] = mapped_column(Timestamp())
    on_expiry: Mapped[str] = mapped_column(String(16))
    escalation: Mapped[Any | None] = mapped_column(Json)
    escalation_level: Mapped[int] = mapped_column(Integer, default=0)
    default_input: Mapped[Any | None] = mapped_column(Json)
    supersedes: Mapped[str | None] = mapped_column(String(32))
    superseded_by: Mapped[str | None] = mapped_column(String(32))
    # An input kept from a superseded interrupt (renewed review keeps what was submitted).
    previous_input: Mapped[Any | None] = mapped_column(Json)
    decision: Mapped[str | None] = mapped_column(String(16))
    resume_input: Mapped[Any | None] = mapped_column(Json)
    resolved_by: Mapped[str | None] = mapped_column(String(200))
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    resolved_at: Mapped[datetime | None] = mapped_column(Timestamp())

    __table_args__ = (
        checked(InterruptKind, "kind"),
        checked(InterruptStatus, "status"),
        # The sweep reads due interrupts through this index: its cost follows the due rows.
        Index(None, "status", "deadline"),
        Index(None, "run_id", "checkpoint_id"),
        # Listings oldest first (``interlude interrupts list``): a page is read in order.
        Index(None, "created_at", "id"),
        # The pending ones oldest first (the inbox, the API's and the bulk review's pages,
        # ``interrupts list --status pending``): only pending rows, however long the history.
        Index(
            "ix_interrupts_pending_created_at_id",
            "created_at",
            "id",
            postgresql_where=PENDING_ONLY,
            sqlite_where=PENDING_ONLY,
        ),
    )


class PendingInterruptRole(Base):
    """A role of a pending interrupt: the inbox reads a role's pending interrupts oldest first
    as a range of this key, whatever other roles hold (``models.inbox_queries``).

    Triggers on ``interrupts`` keep it (migration ``pending_interrupt_roles``): a row for each
    role of an interrupt while it is pending, none once it is not, whichever statement raised,
    answered, expired, escalated, superseded or deleted it. Nothing writes it otherwise."""

    __tablename__ = "pending_interrupt_roles"

    role: Mapped[str] = mapped_column(String(200), primary_key=True)
    created_at: Mapped[datetime] = mapped_column(Timestamp(), primary_key=True)
    interrupt_id: Mapped[str] = mapped_column(String(32), primary_key=True)


class Notification(Base):
    """The outbox of notifications: one notifier owed news of one interrupt, written in the
    transaction that commits the interrupt, marked done by the notify task; the reaper
    publishes again an owed one whose task is overdue (``worker.ops.notifications``)."""

    __tablename__ = "notifications"

    interrupt_id: Mapped[str] = mapped_column(
        ForeignKey("interrupts.id", ondelete="CASCADE"), primary_key=True
    )
    notifier: Mapped[str] = mapped_column(String(200), primary_key=True)
    run_id: Mapped[str] = mapped_column(String(32))
    flow_name: Mapped[str] = mapped_column(String(200))
    flow_version: Mapped[int] = mapped_column(Integer)
    status: Mapped[str] = mapped_column(
        enum_type(NotificationStatus, 16, "notifications", "status")
    )
    # The attempt last published, and when its task is overdue (lost, or never published).
    attempt: Mapped[int] = mapped_column(Integer)
    due_at: Mapped[datetime] = mapped_column(Timestamp())
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    done_at: Mapped[datetime | None] = mapped_column(Timestamp())

    __table_args__ = (
        checked(NotificationStatus, "status"),
        # The reaper reads overdue ones through this index: its cost follows the overdue rows.
        Index(None, "status", "due_at"),
        Index(None, "run_id"),
    )


class KeptEvent(Base):
    """An event sent to a run before it waits on it: kept until the run asks (its mailbox)."""

    __tablename__ = "kept_events"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"))
    name: Mapped[str] = mapped_column(String(200))
    payload: Mapped[Any] = mapped_column(Json)
    sender: Mapped[str] = mapped_column(String(200))
    sender_kind: Mapped[str] = mapped_column(String(16))
    arrived_at: Mapped[datetime] = mapped_column(Timestamp())
    # Set once, when the event answers the run's ask (the interrupt it answered).
    consumed_at: Mapped[datetime | None] = mapped_column(Timestamp())
    interrupt_id: Mapped[str | None] = mapped_column(String(32))

    __table_args__ = (Index(None, "run_id", "name", "consumed_at"),)


class ResumeAttempt(Base):
    __tablename__ = "resume_attempts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    at: Mapped[datetime] = mapped_column(Timestamp())
    run_id: Mapped[str | None] = mapped_column(String(200), index=True)
    interrupt_id: Mapped[str | None] = mapped_column(String(200), index=True)
    actor_id: Mapped[str | None] = mapped_column(String(200))
    # (Not indexed: attempts are looked up by (actor_id, original_key), never by this alone.)
    idempotency_key: Mapped[str | None] = mapped_column(String(200))
    # Set only on an authenticated actor's first attempt with a key: keys belong to the actor,
    # and the unique index on (actor_id, original_key) elects one original per actor and key.
    original_key: Mapped[str | None] = mapped_column(String(200))
    # sha256 of what the contract decides (all but expires_at): the same key with another
    # payload is refused as key_reused, not answered as a duplicate.
    payload_hash: Mapped[str | None] = mapped_column(String(80))
    outcome: Mapped[str] = mapped_column(enum_type(ResumeOutcome, 32, "resume_attempts", "outcome"))
    reason: Mapped[str] = mapped_column(Text)
    payload: Mapped[Any | None] = mapped_column(Json)
    # How the submitter proved who answers, when not with the actor's credential: the answer
    # link (``link:<id>``) or chat callback (``slack:<user>``) it came through.
    via: Mapped[str | None] = mapped_column(String(80))

    __table_args__ = (
        checked(ResumeOutcome, "outcome"),
        UniqueConstraint("actor_id", "original_key"),
    )


class Actor(Base):
    __tablename__ = "actors"

    id: Mapped[str] = mapped_column(String(200), primary_key=True)
    roles: Mapped[Any] = mapped_column(Json)
    credential_hash: Mapped[str] = mapped_column(String(128))
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp())
    kind: Mapped[str] = mapped_column(enum_type(ActorKind, 16, "actors", "kind"))

    __table_args__ = (checked(ActorKind, "kind"),)


class AnswerLink(Base):
    """A signed, single-use, expiring answer link for one responder and one interrupt.

    Only the sha256 of its token is kept. It answers as ``actor_id`` only, only the
    interrupt at the checkpoint, scope and evidence it was issued for, only ``decisions``.
    """

    __tablename__ = "answer_links"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    token_hash: Mapped[str] = mapped_column(String(80))
    interrupt_id: Mapped[str] = mapped_column(
        ForeignKey("interrupts.id", ondelete="CASCADE"), index=True
    )
    run_id: Mapped[str] = mapped_column(String(32))
    checkpoint_id: Mapped[str] = mapped_column(String(32))
    scope_hash: Mapped[str] = mapped_column(String(80))
    evidence_hash: Mapped[str] = mapped_column(String(80))
    policy_version: Mapped[str | None] = mapped_column(String(64))
    actor_id: Mapped[str] = mapped_column(String(200), index=True)
    # A fingerprint of the actor's credential hash when issued: rotating (or revoking) the
    # actor ends its links, and a later rotation does not bring them back.
    actor_binding: Mapped[str] = mapped_column(String(80))
    decisions: Mapped[Any] = mapped_column(Json)
    channel: Mapped[str] = mapped_column(String(16))
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    expires_at: Mapped[datetime] = mapped_column(Timestamp())
    revoked_at: Mapped[datetime | None] = mapped_column(Timestamp())
    revoked_by: Mapped[str | None] = mapped_column(String(200))


class ActorContact(Base):
    """Where an actor is reached, kept by the operator: an e-mail address, a Slack user.

    A Slack callback answers as the actor its user is mapped to here, and only then.
    """

    __tablename__ = "actor_contacts"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    actor_id: Mapped[str] = mapped_column(ForeignKey("actors.id", ondelete="CASCADE"), index=True)
    channel: Mapped[str] = mapped_column(enum_type(ContactChannel, 16, "actor_contacts", "channel"))
    address: Mapped[str] = mapped_column(String(320))
    created_at: Mapped[datetime] = mapped_column(Timestamp())

    __table_args__ = (
        checked(ContactChannel, "channel"),
        UniqueConstraint("channel", "address"),
    )


class Effect(Base):
    __tablename__ = "effects"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    run_id: Mapped[str] = mapped_column(ForeignKey("runs.id", ondelete="CASCADE"), index=True)
    step: Mapped[str] = mapped_column(String(200))
    name: Mapped[str] = mapped_column(String(200))
    idempotency_key: Mapped[str] = mapped_column(String(400), unique=True)
    epoch: Mapped[int] = mapped_column(Integer)
    request_hash: Mapped[str] = mapped_column(String(80))
    status: Mapped[str] = mapped_column(enum_type(EffectStatus, 16, "effects", "status"))
    receipt: Mapped[Any | None] = mapped_column(Json)
    error: Mapped[str | None] = mapped_column(Text)
    created_at: Mapped[datetime] = mapped_column(Timestamp())
    updated_at: Mapped[datetime] = mapped_column(Timestamp())

    __table_args__ = (checked(EffectStatus, "status"),)


# ``loaded`` makes instances without the mapped constructor, which is what would configure
# the mappers on first use: configured here, once all the tables are declared.
configure_mappers()
