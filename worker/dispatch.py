"""Publishing tasks, always after the transaction that made them due has committed.

A publish that fails is not an error for the caller: the run row is the outbox and the
reaper republishes runs that sit queued or resuming without a claim.

Every publish of interlude (enqueue, chained steps, retries, accepted resumes, sweeps, the
reaper) goes through ``publish_step``, which hands it to the installed publisher: Celery by
default, an in-process recorder in tests (``worker.testing``).
"""

from __future__ import annotations

import logging
from typing import Protocol

from worker.tasknames import QUEUE_RESUMES, QUEUE_STEPS, TASK_RESUME, TASK_STEP

log = logging.getLogger(__name__)


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
    app.send_task(name, args=[run_id], queue=queue, countdown=countdown, kwargsrepr=label)


_publisher: Publisher = celery_publisher


def set_publisher(publisher: Publisher) -> Publisher:
    """Install ``publisher`` for every later publish of this process; returns the previous."""
    global _publisher
    previous, _publisher = _publisher, publisher
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
