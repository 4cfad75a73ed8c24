"""Interrupt records: writing one when a run suspends, reading them for people and code."""

from __future__ import annotations

from datetime import timedelta
from typing import TypeVar

from models import attempts as attempt_store
from models import interrupts as interrupt_store
from models import notifications as notification_store
from models.contracts import InterruptView, NotificationView, ResumeAttemptView
from models.db import transaction, utcnow
from models.enums import InterruptKind, InterruptStatus, ResumeOutcome
from models.errors import InterruptNotFoundError, InvalidInputError
from models.settings import get_settings, notify_due_in
from models.statements import Write
from models.tables import Interrupt
from worker import arguments
from worker.engine import dispatch
from worker.flows.flow import Flow, notifier_name

E = TypeVar("E", InterruptStatus, InterruptKind, ResumeOutcome)


def view(row: Interrupt) -> InterruptView:
    return InterruptView.model_validate(row, from_attributes=True)


def owed_writes(flow: Flow, interrupt: Interrupt) -> list[Write]:
    """The outbox rows (one per notifier of ``flow``) that make ``interrupt``'s notifications
    owed, to be written with it; none for a flow without notifiers (the step pays nothing)."""
    if not flow.notifiers:
        return []
    now = utcnow()
    due_at = now + timedelta(seconds=notify_due_in(get_settings()))
    return [
        notification_store.owed_write(
            interrupt_id=interrupt.id,
            run_id=interrupt.run_id,
            flow_name=flow.name,
            flow_version=flow.version,
            notifier=notifier_name(notifier),
            now=now,
            due_at=due_at,
        )
        for notifier in flow.notifiers
    ]


def notify(flow: Flow, interrupt: Interrupt) -> None:
    """Publish one notify task per notifier of ``flow`` about ``interrupt``, once it committed.

    The notifiers run in a worker (``worker.ops.notifications``), each in a task of its own, with a
    time limit and retries: never here, in the step's, the sweep's or the resume's slot. A flow
    without notifiers costs nothing. What is owed was written with the interrupt
    (``owed_writes``): a publish the broker refuses is logged and made due at once, so that the
    reaper's next pass publishes it again; the run goes on.
    """
    refused: list[str] = []
    for notifier in flow.notifiers:
        name = notifier_name(notifier)
        notice = dispatch.Notice(
            interrupt_id=interrupt.id,
            run_id=interrupt.run_id,
            flow=flow.name,
            version=flow.version,
            notifier=name,
        )
        if not dispatch.publish_notice(notice):
            refused.append(name)
    if refused:
        now = utcnow()
        with transaction() as session:
            for name in refused:
                # (attempt 0: the reaper's publish is the first attempt)
                notification_store.owe_again(
                    session, interrupt.id, name, attempt=0, due_at=now, error=None
                )


def list_notifications(run_id: str, interrupt_id: str | None = None) -> list[NotificationView]:
    """The run's notifications (of one interrupt, if given), oldest first: which notifier is
    still owed news, and which failed, with its last error."""
    run_id = arguments.text("run_id", run_id)
    with transaction(readonly=True) as session:
        rows = notification_store.of_run(session, run_id)
        return [
            NotificationView.model_validate(row, from_attributes=True)
            for row in rows
            if interrupt_id is None or row.interrupt_id == interrupt_id
        ]


def list_interrupts(
    run_id: str | None = None,
    status: InterruptStatus | str | None = None,
    kind: InterruptKind | str | None = None,
    limit: int = 1000,
) -> list[InterruptView]:
    """Interrupts, oldest first: the operators' work queue."""
    run_id = arguments.optional_text("run_id", run_id)
    limit = arguments.count("limit", limit)
    wanted_status = _member(InterruptStatus, status, "status") if status is not None else None
    wanted_kind = _member(InterruptKind, kind, "kind").value if kind is not None else None
    with transaction(readonly=True) as session:
        rows = interrupt_store.list_rows(
            session=session, run_id=run_id, status=wanted_status, kind=wanted_kind, limit=limit
        )
        return [view(row) for row in rows]


def _member(enum: type[E], value: str, what: str) -> E:
    try:
        return enum(value)
    except ValueError:
        allowed = ", ".join(m.value for m in enum)
        raise InvalidInputError(detail=f"unknown {what} {value!r}; one of {allowed}") from None


def get_interrupt(interrupt_id: str) -> InterruptView:
    with transaction(readonly=True) as session:
        row = interrupt_store.get(session, interrupt_id)
        if row is None:
            raise InterruptNotFoundError(interrupt_id=interrupt_id)
        return view(row)


def list_resume_attempts(
    interrupt_id: str | None = None,
    run_id: str | None = None,
    limit: int = 1000,
    *,
    before: int | None = None,
    outcome: ResumeOutcome | str | None = None,
) -> list[ResumeAttemptView]:
    """Resume attempts, newest first; pass the last id of a page as ``before`` for the next."""
    interrupt_id = arguments.optional_text("interrupt_id", interrupt_id)
    run_id = arguments.optional_text("run_id", run_id)
    limit = arguments.count("limit", limit)
    before = arguments.optional_count("before", before, arguments.MAX_ROW_ID)
    wanted = _member(ResumeOutcome, outcome, "outcome").value if outcome is not None else None
    with transaction(readonly=True) as session:
        rows = attempt_store.list_attempts(
            session,
            interrupt_id=interrupt_id,
            run_id=run_id,
            outcome=wanted,
            before=before,
            limit=limit,
        )
        return [ResumeAttemptView.model_validate(row, from_attributes=True) for row in rows]


# A run's timeline shows its newest attempts and every accepted one; the listing pages all.
RECENT_ATTEMPTS = 50


def attempts_in_view(run_id: str, recent: int = RECENT_ATTEMPTS) -> list[ResumeAttemptView]:
    """The run's newest ``recent`` resume attempts and every accepted one, newest first:
    however many refusals were recorded, the accepted attempt is never crowded out."""
    newest = list_resume_attempts(run_id=run_id, limit=recent)
    accepted = list_resume_attempts(run_id=run_id, outcome=ResumeOutcome.ACCEPTED)
    merged = {attempt.id: attempt for attempt in [*newest, *accepted]}
    return sorted(merged.values(), key=lambda attempt: attempt.id, reverse=True)


def count_resume_attempts(
    run_id: str | None = None, interrupt_id: str | None = None
) -> dict[str, int]:
    """How many resume attempts there were, by outcome."""
    run_id = arguments.optional_text("run_id", run_id)
    interrupt_id = arguments.optional_text("interrupt_id", interrupt_id)
    with transaction(readonly=True) as session:
        return attempt_store.count_attempts(session, run_id=run_id, interrupt_id=interrupt_id)
