"""A pool child killed mid-step (the kernel's OOM killer, a crash in native code): its run goes
back to the queue at once, not a lease and a reaper pass later.

Celery's main process sees the child die (``WorkerLostError``) and puts the task's message
back on the queue (``task_reject_on_worker_lost``). On its own that copy would find the run
still held by the dead child's lease and do nothing, and the step would run again only once
the lease expired and the reaper passed (about a minute at the defaults). The request class
of the step tasks first requeues the run in the database, as the reaper would: only this
process knows for certain that the owner is dead, so only it may cut the lease short. An
effect the child had called is settled as after any expiry (``worker.engine.fencing``).
"""

from __future__ import annotations

import logging
import socket
from typing import Any

from celery.exceptions import WorkerLostError
from celery.worker.request import Request

log = logging.getLogger(__name__)


class StepRequest(Request):  # type: ignore[misc]
    """Celery's request of a step or resume task, in the worker's main process."""

    def on_failure(
        self, exc_info: Any, send_failed_event: bool = True, return_ok: bool = False
    ) -> None:
        # (As Celery's own handler does: the pool hands the error over wrapped.)
        exc = getattr(exc_info.exception, "exc", exc_info.exception)
        if isinstance(exc, WorkerLostError) and self.worker_pid and self.args:
            _requeue(str(self.args[0]), f"{socket.gethostname()}:{self.worker_pid}")
        super().on_failure(exc_info, send_failed_event=send_failed_event, return_ok=return_ok)


def _requeue(run_id: str, owner: str) -> None:
    from worker.engine.reaper import requeue_lost

    try:
        requeue_lost(run_id, owner)
    except Exception:  # the reaper does it later; Celery must still requeue the message
        log.exception(
            "could not requeue the run of dead process %s; the reaper will",
            owner,
            extra={"action": "requeue_failed", "run_id": run_id},
        )
