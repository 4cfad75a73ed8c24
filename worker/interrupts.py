"""Interrupt records: writing one when a run suspends, reading them for people and code."""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from models import repository
from models.contracts import InterruptView, ResumeAttemptView
from models.db import transaction, utcnow
from models.enums import InterruptKind, InterruptStatus
from models.errors import InterruptNotFoundError, InvalidInputError
from models.tables import Interrupt, ResumeAttempt, Run
from worker.context import InterruptSpec
from worker.flows import Flow

log = logging.getLogger(__name__)
E = TypeVar("E", InterruptStatus, InterruptKind)


def record_interrupt(
    session: Session,
    run: Run,
    spec: InterruptSpec,
    *,
    step: str,
    checkpoint_id: str,
    actor: str,
) -> Interrupt:
    """The durable interrupt for a run that has just moved to ``waiting``."""
    now = utcnow()
    interrupt = Interrupt(
        id=repository.new_id(),
        run_id=run.id,
        name=spec.name,
        kind=spec.kind.value,
        status=InterruptStatus.PENDING.value,
        reason=spec.reason,
        step=step,
        checkpoint_id=checkpoint_id,
        state_version=run.state_version,
        flow_version=run.flow_version,
        schema_name=spec.schema_name,
        schema_version=spec.schema_version,
        json_schema=spec.json_schema,
        roles=spec.roles,
        scope=spec.scope,
        evidence=spec.evidence,
        evidence_hash=spec.evidence_hash,
        separate_from_starter=spec.separate_from_starter,
        deadline=now + timedelta(seconds=spec.expires_in),
        on_expiry=spec.on_expiry.value,
        escalation=spec.escalation,
        escalation_level=0,
        default_input=spec.default_input,
        created_at=now,
    )
    session.add(interrupt)
    repository.record_event(
        session,
        run.id,
        actor=actor,
        trigger="interrupt",
        detail={"interrupt_id": interrupt.id, "name": spec.name, "kind": spec.kind.value},
        at=now,
    )
    return interrupt


def view(row: Interrupt) -> InterruptView:
    return InterruptView.model_validate(row, from_attributes=True)


def notify(flow: Flow, interrupt: Interrupt) -> None:
    """Tell the flow's notifiers about a committed interrupt; their failures are only logged."""
    if not flow.notifiers:
        return
    snapshot = view(interrupt)
    for notifier in flow.notifiers:
        try:
            notifier(snapshot)
        except Exception:
            log.exception(
                "interrupt notifier failed",
                extra={"action": "notify_failed", "run_id": interrupt.run_id},
            )


def list_interrupts(
    run_id: str | None = None,
    status: InterruptStatus | str | None = None,
    kind: InterruptKind | str | None = None,
    limit: int = 1000,
) -> list[InterruptView]:
    """Interrupts, oldest first: the operators' work queue."""
    query = select(Interrupt).order_by(Interrupt.created_at, Interrupt.id).limit(limit)
    if run_id is not None:
        query = query.where(Interrupt.run_id == run_id)
    if status is not None:
        query = query.where(Interrupt.status == _member(InterruptStatus, status, "status").value)
    if kind is not None:
        query = query.where(Interrupt.kind == _member(InterruptKind, kind, "kind").value)
    with transaction(readonly=True) as session:
        return [view(row) for row in session.execute(query).scalars()]


def _member(enum: type[E], value: str, what: str) -> E:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise InvalidInputError(detail=f"unknown {what} {value!r}; one of {allowed}") from None


def get_interrupt(interrupt_id: str) -> InterruptView:
    with transaction(readonly=True) as session:
        row = session.get(Interrupt, interrupt_id)
        if row is None:
            raise InterruptNotFoundError(interrupt_id=interrupt_id)
        return view(row)


def list_resume_attempts(
    interrupt_id: str | None = None, run_id: str | None = None, limit: int = 1000
) -> list[ResumeAttemptView]:
    query = select(ResumeAttempt).order_by(ResumeAttempt.id).limit(limit)
    if interrupt_id is not None:
        query = query.where(ResumeAttempt.interrupt_id == interrupt_id)
    if run_id is not None:
        query = query.where(ResumeAttempt.run_id == run_id)
    with transaction(readonly=True) as session:
        return [
            ResumeAttemptView.model_validate(row, from_attributes=True)
            for row in session.execute(query).scalars()
        ]
