"""The claims store: a run taken under a fresh lease and fencing epoch, its lease renewed, and
its owner checked before a write that is not a transition."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

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

from models.checkpoints import CHECKPOINTS
from models.db import dialect, utcnow
from models.dialects import Dialect, count_write
from models.enums import EffectStatus, EventKind, InterruptStatus, RunState
from models.errors import FencedError, StaleStateError
from models.events import events_selected
from models.interrupts import INTERRUPTS
from models.runs import RUNS, move
from models.scope import Scope
from models.statements import Write, named, only_if
from models.tables import Checkpoint, Effect, Interrupt, Run, column_keys, from_row, loaded
from statemachine import CLAIMABLE

EFFECTS: Table = Effect.__table__  # type: ignore[assignment]


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
    events = events_selected(
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
