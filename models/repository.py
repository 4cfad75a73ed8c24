"""The only code that writes run state: inserts, CAS transitions, checkpoints and audit events.

Every transition is ``UPDATE runs ... WHERE id = :id AND state_version = :seen`` (optionally
fenced on the lease epoch too); zero rows means another process moved the run first, and the
caller gets a typed error naming what it expected and what it found.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

from sqlalchemy import Table, insert, select, update
from sqlalchemy.orm import Session
from sqlalchemy.orm.attributes import set_committed_value

from models.db import utcnow
from models.enums import RunState
from models.errors import FencedError, RunNotFoundError, StaleStateError
from models.tables import Checkpoint, Event, Run
from statemachine import destination

CLAIMABLE = (RunState.QUEUED.value, RunState.RESUMING.value)
RUNS: Table = Run.__table__  # type: ignore[assignment]
EVENTS: Table = Event.__table__  # type: ignore[assignment]
CHECKPOINTS: Table = Checkpoint.__table__  # type: ignore[assignment]


def new_id() -> str:
    return uuid.uuid4().hex


def record_event(
    session: Session,
    run_id: str,
    *,
    actor: str,
    trigger: str,
    from_state: str | None = None,
    to_state: str | None = None,
    detail: Any = None,
    at: datetime | None = None,
) -> None:
    # A Core insert: events are never read back through the session, and skipping the ORM's
    # unit of work for them is a measurable share of a step's cost.
    session.execute(
        insert(EVENTS).values(
            run_id=run_id,
            at=at or utcnow(),
            actor=actor,
            trigger=trigger,
            from_state=from_state,
            to_state=to_state,
            detail=detail or {},
        )
    )


def insert_run(
    session: Session,
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
    session.execute(insert(RUNS).values(values))
    run = Run(**values)
    insert_checkpoint(
        session,
        Checkpoint(
            id=new_id(),
            run_id=run.id,
            seq=0,
            step=None,
            next_step=first_step,
            state={},
            budget_consumed=0.0,
            effects=[],
            epoch=0,
            created_at=now,
        ),
    )
    record_event(
        session,
        run.id,
        actor=started_by or "app",
        trigger="enqueue",
        to_state=RunState.QUEUED.value,
        detail={"flow": flow_name, "version": flow_version},
        at=now,
    )
    return run


def load_run(session: Session, run_id: str) -> Run:
    run = session.get(Run, run_id)
    if run is None:
        raise RunNotFoundError(run_id=run_id)
    return run


def move(
    session: Session,
    run: Run,
    trigger: str,
    *,
    actor: str,
    detail: Any = None,
    fence_epoch: int | None = None,
    **fields: Any,
) -> Run:
    """Apply ``trigger`` to ``run`` as a CAS on its state version and append the audit event.

    ``fence_epoch`` additionally requires that the lease epoch is still ours; a mismatch
    raises FencedError (a stale owner), any other lost race StaleStateError.
    """
    return move_through(
        session, run, [(trigger, detail)], actor=actor, fence_epoch=fence_epoch, **fields
    )


def move_through(
    session: Session,
    run: Run,
    triggers: Sequence[tuple[str, Any]],
    *,
    actor: str,
    fence_epoch: int | None = None,
    **fields: Any,
) -> Run:
    """Apply several triggers in order as one CAS, one audit event each.

    A task that continues a run commits ``advance`` and the next ``claim`` this way: one
    UPDATE instead of two. The run's pause request comes back with it (it is not part of the
    state version, so it is read fresh here).
    """
    states = [run.state]
    for trigger, _ in triggers:
        states.append(destination(trigger, states[-1], run_id=run.id).value)
    dest = RunState(states[-1])
    now = utcnow()
    values: dict[str, Any] = {
        "state": dest.value,
        "state_version": run.state_version + len(triggers),
        "updated_at": now,
        **fields,
    }
    if dest.terminal:
        values.setdefault("finished_at", now)
        values.setdefault("lease_owner", None)
        values.setdefault("lease_expires_at", None)
    stmt = update(RUNS).where(RUNS.c.id == run.id, RUNS.c.state_version == run.state_version)
    if fence_epoch is not None:
        stmt = stmt.where(RUNS.c.lease_epoch == fence_epoch)
    returned = session.execute(stmt.values(**values).returning(RUNS.c.pause_requested_by)).first()
    if returned is None:
        _raise_lost_race(session, run, fence_epoch)
    values["pause_requested_by"] = returned.pause_requested_by
    for key, value in values.items():
        set_committed_value(run, key, value)
    session.execute(
        insert(EVENTS),
        [
            {
                "run_id": run.id,
                "at": now,
                "actor": actor,
                "trigger": trigger,
                "from_state": states[i],
                "to_state": states[i + 1],
                "detail": detail or {},
            }
            for i, (trigger, detail) in enumerate(triggers)
        ],
    )
    return run


def _raise_lost_race(session: Session, run: Run, fence_epoch: int | None) -> NoReturn:
    found = session.execute(
        select(Run.state, Run.state_version, Run.lease_epoch).where(Run.id == run.id)
    ).one_or_none()
    if found is None:
        raise RunNotFoundError(run_id=run.id)
    if fence_epoch is not None and found.lease_epoch != fence_epoch:
        raise FencedError(run_id=run.id, epoch=fence_epoch)
    raise StaleStateError(
        run_id=run.id,
        expected=f"{run.state} (version {run.state_version})",
        found=f"{found.state} (version {found.state_version})",
    )


def claim(
    session: Session, run_id: str, *, owner: str, lease_seconds: float, **fields: Any
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
            "claim",
            actor=f"worker:{owner}",
            detail={"epoch": run.lease_epoch + 1, "step": run.next_step},
            lease_owner=owner,
            lease_epoch=run.lease_epoch + 1,
            lease_expires_at=now + timedelta(seconds=lease_seconds),
            step_executions=run.step_executions + 1,
            not_before=None,
            **fields,
        )
    except StaleStateError:
        return None


def assert_owner(session: Session, run_id: str, epoch: int) -> None:
    """Fence a write that is not a transition: the run must still be running under ``epoch``.

    On PostgreSQL the update also locks the run row until the caller's transaction ends,
    so a reclaim cannot slip in between this check and the caller's commit.
    """
    result = session.execute(
        update(Run)
        .where(Run.id == run_id, Run.lease_epoch == epoch, Run.state == RunState.RUNNING.value)
        .values(updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:  # type: ignore[attr-defined]
        raise FencedError(run_id=run_id, epoch=epoch)


def latest_checkpoint(session: Session, run: Run) -> Checkpoint:
    checkpoint = session.execute(
        select(Checkpoint).where(Checkpoint.run_id == run.id, Checkpoint.seq == run.checkpoint_seq)
    ).scalar_one()
    return checkpoint


def new_checkpoint(
    run: Run,
    *,
    step: str | None,
    next_step: str | None,
    state: Any,
    budget_consumed: float,
    effects: list[str],
    epoch: int,
) -> Checkpoint:
    """The checkpoint following the run's latest; the caller adds it with the transition."""
    return Checkpoint(
        id=new_id(),
        run_id=run.id,
        seq=run.checkpoint_seq + 1,
        step=step,
        next_step=next_step,
        state=state,
        budget_consumed=budget_consumed,
        effects=effects,
        epoch=epoch,
        created_at=utcnow(),
    )


def insert_checkpoint(session: Session, checkpoint: Checkpoint) -> None:
    """Append ``checkpoint`` (a Core insert, like events: nothing reads it back in this session)."""
    session.execute(
        insert(CHECKPOINTS).values(
            {column.key: getattr(checkpoint, column.key) for column in CHECKPOINTS.columns}
        )
    )


def set_flags(session: Session, run_id: str, **fields: Any) -> bool:
    """Write run fields that are not part of the lifecycle (pause request, dispatch time)."""
    result = session.execute(
        update(Run)
        .where(Run.id == run_id)
        .values(**fields)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def mark_redispatched(
    session: Session, run_id: str, *, state_version: int, cutoff: datetime, now: datetime
) -> bool:
    """Record a republish of an unclaimed run, only if nobody moved or republished it since.

    The reaper publishes only when this returns True, so two reapers never both republish.
    """
    result = session.execute(
        update(Run)
        .where(
            Run.id == run_id,
            Run.state_version == state_version,
            Run.state.in_(CLAIMABLE),
            (Run.dispatched_at.is_(None)) | (Run.dispatched_at < cutoff),
        )
        .values(dispatched_at=now)
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]
