"""The forks store: a new run started from a checkpoint of another, linked both ways.

The fork keeps its origin's flow version, the state and budget at that checkpoint, and the
checkpoint's sequence number, so that the effects the origin applied from there on keep their
default keys' shape (run:checkpoint:step:name) on the fork. Copied as applied (unless the
operator asks for them to run again), they are not repeated: the fork's step finds their
receipts. An effect with a key of the caller's own is not copied (a key belongs to one run).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.db import utcnow
from models.enums import EffectStatus, EventKind, RunState
from models.events import record_event
from models.storable import new_id
from models.tables import Checkpoint, Effect, Run


def fork_point(session: Session, run_id: str, step: str) -> Checkpoint | None:
    """The run's latest checkpoint from which ``step`` runs next (before it ran)."""
    query = (
        select(Checkpoint)
        .where(Checkpoint.run_id == run_id, Checkpoint.next_step == step)
        .order_by(Checkpoint.seq.desc())
        .limit(1)
    )
    return session.execute(query).scalars().first()


def insert_fork(
    session: Session,
    origin: Run,
    at: Checkpoint,
    *,
    input: Any,
    started_by: str,
    copy_effects: bool,
) -> tuple[Run, list[str]]:
    """The fork (queued at ``at``'s next step) and the names of the effects copied to it."""
    now = utcnow()
    fork = Run(
        id=new_id(),
        flow_name=origin.flow_name,
        flow_version=origin.flow_version,
        input=input,
        state=RunState.QUEUED.value,
        state_version=0,
        next_step=at.next_step,
        checkpoint_seq=at.seq,
        started_by=started_by,
        lease_epoch=0,
        lost_leases=0,
        step_attempts=0,
        step_executions=0,
        budget_allowance=origin.budget_allowance,
        budget_consumed=at.budget_consumed,
        dispatched_at=now,
        created_at=now,
        updated_at=now,
        forked_from=origin.id,
        forked_at=at.seq,
    )
    session.add(fork)
    session.flush()
    session.add(
        Checkpoint(
            id=new_id(),
            run_id=fork.id,
            seq=at.seq,
            step=None,
            next_step=at.next_step,
            state=dict(at.state or {}),
            budget_consumed=at.budget_consumed,
            effects=[],
            epoch=0,
            created_at=now,
            remembered=None,
        )
    )
    copied = _copy_effects(session, origin.id, fork.id, at.seq) if copy_effects else []
    detail = {"from": origin.id, "checkpoint": at.seq, "step": at.next_step}
    record_event(
        session,
        fork.id,
        actor=started_by,
        kind=EventKind.ENQUEUE,
        to_state=RunState.QUEUED.value,
        detail=detail,
    )
    record_event(
        session,
        origin.id,
        actor=started_by,
        kind=EventKind.FORKED,
        detail={"to": fork.id, "checkpoint": at.seq, "step": at.next_step, "effects": copied},
    )
    return fork, copied


def _copy_effects(session: Session, origin: str, fork: str, seq: int) -> list[str]:
    applied = session.execute(
        select(Effect).where(Effect.run_id == origin, Effect.status == EffectStatus.APPLIED.value)
    ).scalars()
    copied = []
    for effect in list(applied):
        parts = effect.idempotency_key.split(":", 2)
        # Only the default keys (run:checkpoint:step:name) of the steps from the fork on.
        if len(parts) < 3 or parts[0] != origin or not parts[1].isdigit() or int(parts[1]) < seq:
            continue
        now = utcnow()
        session.add(
            Effect(
                run_id=fork,
                step=effect.step,
                name=effect.name,
                idempotency_key=f"{fork}:{parts[1]}:{parts[2]}",
                epoch=0,
                request_hash=effect.request_hash,
                status=EffectStatus.APPLIED.value,
                receipt=effect.receipt,
                error=None,
                created_at=now,
                updated_at=now,
            )
        )
        copied.append(effect.name)
    session.flush()
    return copied


def forks_of(session: Session, run_id: str) -> list[str]:
    """The runs forked from ``run_id``, oldest first."""
    query = select(Run.id).where(Run.forked_from == run_id).order_by(Run.created_at)
    return [str(found) for found in session.execute(query).scalars()]
