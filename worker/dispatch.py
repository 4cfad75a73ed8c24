"""Publishing tasks, always after the transaction that made them due has committed.

A publish that fails is not an error for the caller: the run row is the outbox and the
reaper republishes runs that sit queued or resuming without a claim.
"""

from __future__ import annotations

import logging

from worker.app import QUEUE_RESUMES, QUEUE_STEPS, TASK_RESUME, TASK_STEP, app

log = logging.getLogger(__name__)


def publish_step(run_id: str, *, resume: bool = False, countdown: float | None = None) -> bool:
    name, queue = (TASK_RESUME, QUEUE_RESUMES) if resume else (TASK_STEP, QUEUE_STEPS)
    try:
        app.send_task(name, args=[run_id], queue=queue, countdown=countdown)
    except Exception as exc:  # broker down: the reaper will republish from the run row
        log.warning(
            "publish failed, the reaper will retry: %s",
            exc,
            extra={"action": "publish_failed", "run_id": run_id},
        )
        return False
    return True
