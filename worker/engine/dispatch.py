"""Publishing tasks, always after the transaction that made them due has committed.

A publish that fails is not an error for the caller: the run row is the outbox and the
reaper republishes runs that sit queued or resuming without a claim.

Every publish of interlude (enqueue, chained steps, retries, accepted resumes, sweeps, the
reaper) goes through ``publish_step``, which hands it to the installed publisher: Celery by
default, an in-process recorder in tests (``worker.testing``). A notification (one notifier, one
interrupt) goes through ``publish_notice`` the same way; its outbox is the notifications table
(``worker.ops.notifications``), from which the reaper publishes a lost one again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from worker.engine.tasknames import (
    FLOW_HEADER,
    QUEUE_NOTIFY,
    QUEUE_RESUMES,
    QUEUE_STEPS,
    TASK_NOTIFY,
    TASK_RESUME,
    TASK_STEP,
)
from worker.present.safetext import escape_controls

log = logging.getLogger(__name__)
# How much of a refused publish's error is logged.
MAX_PUBLISH_ERROR = 300


@dataclass(frozen=True)
class Notice:
    """What one notify task carries, all JSON: which interrupt (of which run), which flow
    version's notifier (by ``worker.flows.flow.notifier_name``), and which attempt this is."""

    interrupt_id: str
    run_id: str
    flow: str
    version: int
    notifier: str
    attempt: int = 1

    def as_kwargs(self) -> dict[str, str | int]:
        """The task's keyword arguments (Flower shows them as they are)."""
        return asdict(self)


class Publisher(Protocol):
    """Sends one task (``name`` with the run id as its only argument) to ``queue``.

    ``flow`` and ``step`` label the task for people watching (the step it is published for).
    """

    def __call__(
        self, name: str, run_id: str, *, queue: str, countdown: float | None, flow: str, step: str
    ) -> None: ...


def celery_publisher(
    name: str, run_id: str, *, queue: str, countdown: float | None, flow: str, step: str
) -> None:
    # Flower (and Celery's own log lines) show kwargsrepr as the task's keyword arguments: here
    # the run's flow and step, searchable in Flower as kwargs:flow=NAME. The task takes none.
    # Imported here: building the Celery app costs a third of a second, which a process that
    # never publishes (most ``interlude`` verbs, the test seam) should not pay.
    from worker.app import app

    label = repr({"flow": flow, "step": step})
    app.send_task(
        name,
        args=[run_id],
        # What Celery's saferepr makes of the one id, without its walk over the arguments.
        argsrepr=repr([run_id]),
        queue=queue,
        countdown=countdown,
        kwargsrepr=label,
        headers={FLOW_HEADER: flow},
        **declaring(app),
    )


def declaring(app: Any) -> dict[str, Any]:
    """Celery's options for a publish's queue declaration, on the broker ``app`` publishes to.

    Celery declares the task's queue before every publish, and kombu binds a copy of the
    queue (and of its exchange) before it finds the queue in its cache of declared ones: about
    60 µs of a publish's 390 (2026-12-06). On Redis the declaration is not needed: Celery
    publishes through the anonymous exchange, which routes by the queue's name alone, onto
    the list of that name, which the push creates. On RabbitMQ a message sent to a queue not
    declared yet is dropped: declared there as before.

    Decided once per producer pool: the app makes another when it is pointed at another
    broker (or after a fork), and the pool's connection is the broker a publish goes to.
    """
    global _declared_for
    pool = app.amqp.producer_pool
    known, on_redis = _declared_for
    if pool is not known:
        on_redis = pool.connections.connection.transport.driver_type == "redis"
        _declared_for = (pool, on_redis)  # (one assignment: threads see either pair whole)
    # A new list at each publish: kombu may append to the one it is given.
    return {"declare": []} if on_redis else {}


_declared_for: tuple[Any, bool] = (None, False)


class NoticePublisher(Protocol):
    """Sends one notify task (``notice`` as its keyword arguments), due after ``countdown``."""

    def __call__(self, notice: Notice, *, countdown: float | None) -> None: ...


def celery_notice_publisher(notice: Notice, *, countdown: float | None) -> None:
    from worker.app import app

    app.send_task(
        TASK_NOTIFY,
        kwargs=notice.as_kwargs(),
        queue=QUEUE_NOTIFY,
        countdown=countdown,
        **declaring(app),
    )


_publisher: Publisher = celery_publisher
_notice_publisher: NoticePublisher = celery_notice_publisher


def set_publisher(publisher: Publisher) -> Publisher:
    """Install ``publisher`` for every later publish of this process; returns the previous."""
    global _publisher
    previous, _publisher = _publisher, publisher
    return previous


def set_notice_publisher(publisher: NoticePublisher) -> NoticePublisher:
    """Install ``publisher`` for every later notify task of this process; returns the previous."""
    global _notice_publisher
    previous, _notice_publisher = _notice_publisher, publisher
    return previous


def publish_step(
    run_id: str,
    *,
    flow: str,
    step: str | None,
    resume: bool = False,
    countdown: float | None = None,
) -> bool:
    """Publish the task that executes ``step`` of ``run_id`` (of ``flow``); False if it failed."""
    name, queue = (TASK_RESUME, QUEUE_RESUMES) if resume else (TASK_STEP, QUEUE_STEPS)
    try:
        _publisher(name, run_id, queue=queue, countdown=countdown, flow=flow, step=step or "")
    except Exception as exc:  # broker down: the reaper will republish from the run row
        log.warning(
            "publish failed, the reaper will retry: %s",
            exc,
            extra={"action": "publish_failed", "run_id": run_id},
        )
        return False
    return True


# A task to publish: (run, resume, flow, step).
StepTask = tuple[str, bool, str, str | None]


def publish_until_refused(
    tasks: Sequence[StepTask], sent: Callable[[str], None] | None = None
) -> list[str]:
    """Publish ``tasks`` in order, calling ``sent(run)`` after each one the broker took; the
    runs not published, the refused one first (empty when every one went out).

    The first refusal ends the publishing: the broker is down, and each refusal may take a
    while. The runs left are the caller's to hand to the reaper.
    """
    for i, (run_id, resume, flow, step) in enumerate(tasks):
        if not publish_step(run_id, flow=flow, step=step, resume=resume):
            return [task[0] for task in tasks[i:]]
        if sent is not None:
            sent(run_id)
    return []


def publish_notice(notice: Notice, *, countdown: float | None = None) -> bool:
    """Publish the task that tells one notifier about one interrupt; False if it failed.

    A refusal is one warning line naming the interrupt and the notifier; the notification stays
    owed in the database, and the reaper publishes it again (its run is not affected).
    """
    try:
        _notice_publisher(notice, countdown=countdown)
    except Exception as exc:
        log.warning(
            "notifier %s not told of interrupt %s (attempt %d) yet: publish failed, the reaper "
            "publishes it again: %s: %s",
            notice.notifier,
            notice.interrupt_id,
            notice.attempt,
            type(exc).__name__,
            escape_controls(str(exc))[:MAX_PUBLISH_ERROR],
            extra={"action": "notify_publish_failed", "run_id": notice.run_id},
        )
        return False
    return True
