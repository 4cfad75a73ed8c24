"""Sweeping expired interrupts: due rows in bounded batches, each policy applied exactly once.

Due rows are read through the ``(status, deadline)`` index, oldest deadline first, so a sweep
costs what is due, not what is waiting. On PostgreSQL a batch is locked with
``FOR UPDATE SKIP LOCKED``: concurrent sweepers take disjoint rows, and the gateway, which locks
the same row before it accepts a resume, is serialised with them. On SQLite every write
transaction begins IMMEDIATE, so a batch is read and applied under the single write lock.
Each interrupt is applied in its own savepoint, so one bad row does not stop its batch.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from models import interrupts as store
from models import runs as run_store
from models.db import transaction, utcnow
from models.enums import EventKind, ExpiryPolicy, RunState
from models.errors import InterludeError
from models.settings import get_settings
from models.tables import Interrupt, Run
from worker import arguments, dispatch
from worker.flows import get_flow, load_flow_modules
from worker.gateway import resume_as_system
from worker.interrupts import notify
from worker.schemas import lookup

log = logging.getLogger(__name__)

SYSTEM_ACTOR = "system:expiry"

# Something to do once the batch has committed (publish a resume, notify about an escalation).
AfterCommit = Callable[[], None]


class _Deferred(Exception):
    """Control flow: this interrupt cannot be handled by this process now; leave it pending."""


@dataclass
class _Batch:
    selected: int = 0
    handled: int = 0
    passed_over: list[str] = field(default_factory=list)
    after_commit: list[AfterCommit] = field(default_factory=list)


def sweep_expired(now: datetime | None = None, batch: int | None = None) -> int:
    """Apply the expiry policy of every due interrupt; returns how many were handled.

    Batches of ``batch`` rows (``INTERLUDE_SWEEP_BATCH``) are each one transaction; the sweep
    goes on until a batch comes back short. Rows passed over (deferred or failed) are left
    pending for the next sweep and not selected again by this one.
    """
    now = arguments.optional_moment("now", now) or utcnow()
    # INTERLUDE_SWEEP_BATCH is already in range (models.settings); a batch given here may not be.
    size = get_settings().sweep_batch if batch is None else arguments.count("sweep batch", batch)
    # The default policy validates its input against schemas that the flow modules register.
    load_flow_modules()
    handled = 0
    passed_over: set[str] = set()
    while True:
        result = _sweep_batch(now, size, passed_over)
        for action in result.after_commit:
            action()
        handled += result.handled
        passed_over.update(result.passed_over)
        if result.selected < size:
            return handled


def _sweep_batch(now: datetime, size: int, exclude: Collection[str]) -> _Batch:
    result = _Batch()
    with transaction() as session:
        due = store.due(session, now, size, exclude)
        result.selected = len(due)
        runs = run_store.load_runs(session, {interrupt.run_id for interrupt in due})
        for interrupt in due:
            # Read before anything can expire the row: the log lines below need them.
            interrupt_id, run_id = interrupt.id, interrupt.run_id
            run = runs.get(run_id)
            try:
                with session.begin_nested():
                    after = _apply(session, interrupt, run, now)
            except _Deferred as deferred:
                _forget(session, interrupt, run)
                log.warning(
                    "expiry of interrupt %s deferred: %s",
                    interrupt_id,
                    deferred,
                    extra={"action": "expiry_deferred", "run_id": run_id},
                )
                result.passed_over.append(interrupt_id)
            except Exception:
                _forget(session, interrupt, run)
                log.exception(
                    "expiry of interrupt %s failed; it stays pending",
                    interrupt_id,
                    extra={"action": "expiry_failed", "run_id": run_id},
                )
                result.passed_over.append(interrupt_id)
            else:
                result.handled += 1
                if after is not None:
                    result.after_commit.append(after)
    return result


def _forget(session: Session, *rows: Interrupt | Run | None) -> None:
    # Values written with set_committed_value inside a rolled-back savepoint are not undone by
    # SQLAlchemy; reload these rows if anything in the batch looks at them again.
    for row in rows:
        if row is not None:
            session.expire(row)


def _apply(
    session: Session, interrupt: Interrupt, run: Run | None, now: datetime
) -> AfterCommit | None:
    """Apply ``interrupt``'s policy; returns what to do after commit, if anything."""
    if run is None or not _waits_on(run, interrupt):
        _close(session, interrupt)
        run_store.record_event(
            session,
            interrupt.run_id,
            actor=SYSTEM_ACTOR,
            kind=EventKind.INTERRUPT_EXPIRED,
            detail={
                **_detail(interrupt),
                "note": "the run was no longer waiting on it",
                "run_state": run.state if run is not None else None,
            },
        )
        _log(interrupt, "expire_orphan")
        return None
    policy = ExpiryPolicy(interrupt.on_expiry)
    if policy is ExpiryPolicy.ESCALATE:
        escalation = interrupt.escalation or {}
        if interrupt.escalation_level < int(escalation.get("max", 0)):
            return _escalate(session, interrupt, run, escalation, now)
        _end(session, interrupt, run, EventKind.EXPIRE, note="escalation limit reached")
        return None
    if policy is ExpiryPolicy.DEFAULT:
        return _default(session, interrupt, run)
    _end(
        session,
        interrupt,
        run,
        EventKind.CANCEL if policy is ExpiryPolicy.CANCEL else EventKind.EXPIRE,
    )
    return None


def _waits_on(run: Run, interrupt: Interrupt) -> bool:
    """The run still waits at the point where ``interrupt`` was raised."""
    return run.state == RunState.WAITING.value and run.state_version == interrupt.state_version


def _close(session: Session, interrupt: Interrupt) -> None:
    """``pending → expired``, conditionally: a row handled meanwhile is not handled twice."""
    if not store.transition(session, interrupt, "expire", resolved_by=SYSTEM_ACTOR):
        raise _Deferred("it was resolved meanwhile")


def _end(
    session: Session,
    interrupt: Interrupt,
    run: Run,
    trigger: EventKind,
    *,
    note: str | None = None,
) -> None:
    """The wait is over for good: the interrupt expires, the run expires or is cancelled."""
    _close(session, interrupt)
    detail = _detail(interrupt)
    if note is not None:
        detail["note"] = note
    run_store.move(
        session,
        run,
        trigger,
        actor=SYSTEM_ACTOR,
        detail=detail,
        error=f"interrupt {interrupt.name!r} passed its deadline ({note or interrupt.on_expiry})",
    )
    _log(interrupt, trigger)


def _escalate(
    session: Session,
    interrupt: Interrupt,
    run: Run,
    escalation: dict[str, Any],
    now: datetime,
) -> AfterCommit:
    """A new pending interrupt for the escalation roles supersedes the old one."""
    renewed = store.supersede(
        session,
        interrupt,
        resolved_by=SYSTEM_ACTOR,
        roles=list(escalation["roles"]),
        deadline=now + timedelta(seconds=float(escalation["expires_in"])),
        escalation_level=interrupt.escalation_level + 1,
    )
    if renewed is None:
        raise _Deferred("it was resolved meanwhile")
    run_store.record_event(
        session,
        run.id,
        actor=SYSTEM_ACTOR,
        kind=EventKind.ESCALATE,
        detail={
            **_detail(interrupt),
            "new_interrupt_id": renewed.id,
            "level": renewed.escalation_level,
            "roles": renewed.roles,
            "new_deadline": renewed.deadline.isoformat(),
        },
    )
    _log(interrupt, "escalate")
    flow_name, flow_version, run_id = run.flow_name, run.flow_version, run.id

    def tell_notifiers() -> None:
        try:
            flow = get_flow(flow_name, flow_version, run_id=run_id)
        except InterludeError as exc:
            log.warning(
                "escalation not notified: %s", exc, extra={"action": "notify", "run_id": run_id}
            )
            return
        notify(flow, renewed)

    return tell_notifiers


def _default(session: Session, interrupt: Interrupt, run: Run) -> AfterCommit | None:
    """Resume with the declared default input, through the gateway's own acceptance path."""
    if lookup(interrupt.schema_name, interrupt.schema_version) is None:
        # Fail closed: without the input model this process cannot validate the default.
        schema = f"{interrupt.schema_name}.v{interrupt.schema_version}"
        raise _Deferred(f"input schema {schema} is not known to this process")
    result = resume_as_system(
        session,
        interrupt,
        actor_id=SYSTEM_ACTOR,
        input=interrupt.default_input or {},
        reason="deadline passed",
    )
    if not result.accepted:
        # The refusal is recorded; the wait still has to end, so the run expires.
        _end(
            session,
            interrupt,
            run,
            EventKind.EXPIRE,
            note=f"default input refused ({result.outcome.value}: {result.reason})",
        )
        return None
    _log(interrupt, "default")
    run_id, flow_name, step = run.id, run.flow_name, run.next_step

    def publish_resume() -> None:
        dispatch.publish_step(run_id, flow=flow_name, step=step, resume=True)

    return publish_resume


def _detail(interrupt: Interrupt) -> dict[str, Any]:
    return {
        "interrupt_id": interrupt.id,
        "name": interrupt.name,
        "policy": interrupt.on_expiry,
        "deadline": interrupt.deadline.isoformat(),
    }


def _log(interrupt: Interrupt, action: str) -> None:
    log.info(
        "interrupt %s (%s) past its deadline: %s",
        interrupt.id,
        interrupt.name,
        action,
        extra={"action": f"expiry_{action}", "run_id": interrupt.run_id},
    )
