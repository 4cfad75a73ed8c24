"""Telling one notifier about one interrupt: the work of one ``interlude.notify`` task.

``worker.interrupts.notify`` publishes a task per notifier once an interrupt has committed; a
worker runs each here, in its pool, never in the slot that committed the interrupt. The task
loads the flow and the interrupt and calls the notifier with the interrupt's snapshot, unless
the interrupt was closed meanwhile (nobody should be asked to answer it). A call that fails is
tried again by a new task, ``INTERLUDE_NOTIFY_BACKOFF`` seconds later and twice as long each
time after, at most ``INTERLUDE_NOTIFY_RETRIES`` times; then it is logged as one warning line.
One task per notifier: a retry of one never calls another again.

A call is bounded by ``INTERLUDE_NOTIFY_TIMEOUT_SECONDS`` where the pool enforces Celery's time
limits (worker.app): prefork raises ``SoftTimeLimitExceeded`` in the call, a failure like any
other. A threads or solo pool enforces none: there a call holds its thread until it returns.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from enum import StrEnum

from models import interrupts as interrupt_store
from models.contracts import InterruptView
from models.db import transaction
from models.enums import InterruptStatus
from models.settings import LONGEST_NOTIFY_BACKOFF, get_settings
from worker.engine.dispatch import Notice, publish_notice
from worker.flows.flow import get_flow
from worker.interrupts import view
from worker.present.safetext import escape_controls

log = logging.getLogger(__name__)
# How much of a failed notifier's message is logged.
MAX_NOTIFIER_ERROR = 300


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
            return Delivery(Outcome.SKIPPED)
        # Outside any transaction: a slow notifier holds no database connection.
        notifier(snapshot)
    except Exception as exc:
        return _failed(notice, exc)
    log.info(
        "notifier %s told of interrupt %s",
        notice.notifier,
        notice.interrupt_id,
        extra={"action": "notified", "run_id": notice.run_id},
    )
    return Delivery(Outcome.NOTIFIED)


def _pending(notice: Notice) -> InterruptView | None:
    """The interrupt's snapshot while it is pending; else None, said at INFO."""
    with transaction(readonly=True) as session:
        row = interrupt_store.get(session, notice.interrupt_id)
        snapshot = view(row) if row is not None else None
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
    """Publish the next attempt, or log the last failure as one warning line."""
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
        if publish_notice(replace(notice, attempt=notice.attempt + 1), countdown=delay):
            return Delivery(Outcome.RETRYING, error=error, retry_in=delay)
        # (publish_notice said, in its warning line, that this notification is lost)
        return Delivery(Outcome.FAILED, error=error)
    log.warning(
        "interrupt notifier %s failed for interrupt %s (attempt %d, the last): %s",
        notice.notifier,
        notice.interrupt_id,
        notice.attempt,
        error,
        extra={"action": "notify_failed", **extra},
    )
    return Delivery(Outcome.FAILED, error=error)
