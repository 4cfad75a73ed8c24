"""Telling one notifier about one interrupt: the work of one ``interlude.notify`` task, and
the outbox that makes sure each is told.

``worker.interrupts.notify`` publishes a task per notifier once an interrupt has committed; a
worker runs each here, in its pool, never in the slot that committed the interrupt. The task
loads the flow and the interrupt and calls the notifier with the interrupt's snapshot, unless
the interrupt was closed meanwhile (nobody should be asked to answer it). A call that fails is
tried again by a new task, ``INTERLUDE_NOTIFY_BACKOFF`` seconds later and twice as long each
time after, at most ``INTERLUDE_NOTIFY_RETRIES`` times; then it is logged as one warning line
and a ``notify_failed`` event on the run. One task per notifier: a retry of one never calls
another again.

The outbox (``models.notifications``): what each notifier is owed was written with the
interrupt; the task marks it done, or owed again for its next attempt. A task lost on the way
(a worker killed while it held it, a broker that lost it, a publish refused) leaves it owed:
the reaper publishes it again once it is overdue (``republish_overdue``), as the next attempt.
So each notifier is told at least once; twice when its worker dies after the call and before
the mark.

A call is bounded by ``INTERLUDE_NOTIFY_TIMEOUT_SECONDS`` where the pool enforces Celery's time
limits (worker.app): prefork raises ``SoftTimeLimitExceeded`` in the call, a failure like any
other. A threads or solo pool enforces none: there a call holds its thread until it returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum

from sqlalchemy.orm import Session

from models import events as event_store
from models import interrupts as interrupt_store
from models import notifications as notification_store
from models.contracts import InterruptView
from models.db import transaction, utcnow
from models.enums import EventKind, InterruptStatus, NotificationStatus
from models.settings import LONGEST_NOTIFY_BACKOFF, get_settings, notify_due_in
from worker.engine.dispatch import Notice, publish_notice
from worker.flows.flow import get_flow
from worker.interrupts import view
from worker.present.safetext import escape_controls

log = logging.getLogger(__name__)
# How much of a failed notifier's message is logged.
MAX_NOTIFIER_ERROR = 300
# Who records what the outbox gave up on.
ACTOR = "system:notify"
# The error kept for a notification whose tasks were lost, not failed.
LOST = "its task was lost (no worker ended it in time)"


class Outcome(StrEnum):
    NOTIFIED = "notified"
    # The interrupt is closed (answered, expired, superseded...) or gone: nothing to tell.
    SKIPPED = "skipped"
    RETRYING = "retrying"
    FAILED = "failed"


@dataclass(frozen=True)
class Delivery:
    """How one attempt ended; a failure's one-line error, and when the retry published is due."""

    outcome: Outcome
    error: str | None = None
    retry_in: float | None = None


def backoff(attempt: int, first: float) -> float:
    """Seconds before the attempt after ``attempt``: ``first``, doubled at each attempt, and
    never longer than the longest backoff setting (a countdown past Redis's visibility timeout
    loops)."""
    return min(first * 2.0 ** (attempt - 1), LONGEST_NOTIFY_BACKOFF)


def deliver(notice: Notice) -> Delivery:
    """Call the notifier ``notice`` names with its interrupt, if that is still pending.

    Never raises for the notifier's failure (nor for a flow or interrupt this worker cannot
    load): it publishes the next attempt, or logs that there will be none.
    """
    try:
        notifier = get_flow(notice.flow, notice.version, run_id=notice.run_id).get_notifier(
            notice.notifier
        )
        snapshot = _pending(notice)
        if snapshot is None:
            _finish(notice, NotificationStatus.SKIPPED)
            return Delivery(Outcome.SKIPPED)
        # Outside any transaction: a slow notifier holds no database connection.
        notifier(snapshot)
    except Exception as exc:
        return _failed(notice, exc)
    _finish(notice, NotificationStatus.NOTIFIED)
    log.info(
        "notifier %s told of interrupt %s",
        notice.notifier,
        notice.interrupt_id,
        extra={"action": "notified", "run_id": notice.run_id},
    )
    return Delivery(Outcome.NOTIFIED)


def _pending(notice: Notice) -> InterruptView | None:
    """The interrupt's snapshot while it is pending and its notification owed; else None, said
    at INFO (a copy of a task whose notification another copy ended calls nobody)."""
    with transaction(readonly=True) as session:
        row = interrupt_store.get(session, notice.interrupt_id)
        snapshot = view(row) if row is not None else None
        done = notification_store.status_of(session, notice.interrupt_id, notice.notifier)
    if done not in (None, NotificationStatus.OWED.value):
        log.info(
            "notifier %s not called: its notification of interrupt %s is %s already",
            notice.notifier,
            notice.interrupt_id,
            done,
            extra={"action": "notify_skipped", "run_id": notice.run_id},
        )
        return None
    if snapshot is not None and snapshot.status == InterruptStatus.PENDING:
        return snapshot
    log.info(
        "notifier %s not called: interrupt %s is %s",
        notice.notifier,
        notice.interrupt_id,
        snapshot.status if snapshot is not None else "gone",
        extra={"action": "notify_skipped", "run_id": notice.run_id},
    )
    return None


def _failed(notice: Notice, exc: Exception) -> Delivery:
    """Publish the next attempt (owed again first), or log the last failure as one warning
    line and a ``notify_failed`` event."""
    # The exception's text is the notifier's own: escaped, cut, on the line; the traceback at
    # debug level only.
    error = f"{type(exc).__name__}: {escape_controls(str(exc))[:MAX_NOTIFIER_ERROR]}"
    extra = {"run_id": notice.run_id}
    log.debug("notifier %s traceback", notice.notifier, exc_info=exc)
    settings = get_settings()
    if notice.attempt <= settings.notify_retries:
        delay = backoff(notice.attempt, settings.notify_backoff)
        log.info(
            "interrupt notifier %s failed for interrupt %s (attempt %d), again in %gs: %s",
            notice.notifier,
            notice.interrupt_id,
            notice.attempt,
            delay,
            error,
            extra={"action": "notify_retry", **extra},
        )
        following = replace(notice, attempt=notice.attempt + 1)
        due_at = utcnow() + timedelta(seconds=notify_due_in(settings, delay))
        with transaction() as session:
            owed = notification_store.owe_again(
                session,
                notice.interrupt_id,
                notice.notifier,
                attempt=following.attempt,
                due_at=due_at,
                error=error,
            )
        if not owed and _recorded(notice):
            return Delivery(Outcome.SKIPPED)  # another copy of the task ended it meanwhile
        if publish_notice(following, countdown=delay):
            return Delivery(Outcome.RETRYING, error=error, retry_in=delay)
        # (publish_notice said so in its warning line): due at once, for the reaper's next pass
        _owed_now([following], utcnow())
        return Delivery(Outcome.RETRYING, error=error)
    log.warning(
        "interrupt notifier %s failed for interrupt %s (attempt %d, the last): %s",
        notice.notifier,
        notice.interrupt_id,
        notice.attempt,
        error,
        extra={"action": "notify_failed", **extra},
    )
    _finish(notice, NotificationStatus.FAILED, error=error)
    return Delivery(Outcome.FAILED, error=error)


def _recorded(notice: Notice) -> bool:
    """Whether the outbox has a row for ``notice`` (a task published before the outbox has
    none, and goes on as before)."""
    with transaction(readonly=True) as session:
        found = notification_store.status_of(session, notice.interrupt_id, notice.notifier)
    return found is not None


def _finish(notice: Notice, status: NotificationStatus, *, error: str | None = None) -> None:
    """Mark ``notice``'s notification done; a failed one also as a ``notify_failed`` event."""
    with transaction() as session:
        finished = notification_store.finish(
            session, notice.interrupt_id, notice.notifier, status, at=utcnow(), error=error
        )
        if finished and status == NotificationStatus.FAILED:
            _record_failure(session, notice.run_id, notice, error)


def _record_failure(session: Session, run_id: str, notice: Notice, error: str | None) -> None:
    event_store.record_event(
        session,
        run_id,
        actor=ACTOR,
        kind=EventKind.NOTIFY_FAILED,
        detail={
            "interrupt_id": notice.interrupt_id,
            "notifier": notice.notifier,
            "attempts": notice.attempt,
            "error": error,
        },
    )


def republish_overdue(now: datetime, size: int) -> tuple[int, bool]:
    """Publish again, as their next attempt, up to ``size`` owed notifications whose task is
    overdue at ``now`` (the reaper's last stage); how many were handled, and whether the
    broker refused a publish (the rest are due again at the next pass).

    One whose interrupt closed meanwhile is marked skipped, nobody called; one past its last
    attempt is marked failed, with one warning line and a ``notify_failed`` event.
    """
    settings = get_settings()
    due: list[Notice] = []
    handled = 0
    with transaction() as session:
        for row in notification_store.overdue(session, now, size):
            handled += 1
            notice = Notice(
                row.interrupt_id,
                row.run_id,
                row.flow_name,
                row.flow_version,
                row.notifier,
                row.attempt + 1,
            )
            if row.interrupt_status != InterruptStatus.PENDING.value:
                notification_store.finish(
                    session, row.interrupt_id, row.notifier, NotificationStatus.SKIPPED, at=now
                )
                log.info(
                    "notifier %s not called: interrupt %s is %s",
                    row.notifier,
                    row.interrupt_id,
                    row.interrupt_status or "gone",
                    extra={"action": "notify_skipped", "run_id": row.run_id},
                )
                continue
            if row.attempt > settings.notify_retries:
                error = row.error or LOST
                notification_store.finish(
                    session,
                    row.interrupt_id,
                    row.notifier,
                    NotificationStatus.FAILED,
                    at=now,
                    error=error,
                )
                _record_failure(session, row.run_id, replace(notice, attempt=row.attempt), error)
                log.warning(
                    "interrupt notifier %s not told of interrupt %s after %d attempts: %s",
                    row.notifier,
                    row.interrupt_id,
                    row.attempt,
                    error,
                    extra={"action": "notify_failed", "run_id": row.run_id},
                )
                continue
            due_at = now + timedelta(seconds=notify_due_in(settings))
            notification_store.owe_again(
                session,
                row.interrupt_id,
                row.notifier,
                attempt=notice.attempt,
                due_at=due_at,
                error=row.error,
            )
            due.append(notice)
    for i, notice in enumerate(due):
        if not publish_notice(notice):
            _owed_now(due[i:], now)
            return handled, True
        log.warning(
            "notify task of notifier %s for interrupt %s overdue; published again (attempt %d)",
            notice.notifier,
            notice.interrupt_id,
            notice.attempt,
            extra={"action": "notify_republish", "run_id": notice.run_id},
        )
    return handled, False


def _owed_now(unsent: list[Notice], now: datetime) -> None:
    """The broker refused these: owed as before, due at the next pass (not counted)."""
    with transaction() as session:
        for notice in unsent:
            notification_store.owe_again(
                session,
                notice.interrupt_id,
                notice.notifier,
                attempt=notice.attempt - 1,
                due_at=now,
                error=None,
            )
