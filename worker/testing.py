"""Testing flows without a broker or a worker process: record publishes, then drain them here.

``recording()`` installs a recorder as the publisher of this process (see
``worker.engine.dispatch``): every task interlude would send to Celery (a run's steps, accepted
resumes, retries, sweeps' and the reaper's republishes, notifications and their retries) is kept in
memory instead. ``drain()`` then executes them in the calling process through the same code a worker
runs (``worker.engine.runtime.execute``, ``worker.ops.notifications.deliver``), against the real
database, until none is left. This is not Celery's eager mode: nothing runs at
publish time, inside the caller's transaction or stack; tasks run when the test says so.

    with recording() as tasks:
        run_id = enqueue_run("refund", {...})
        tasks.drain()                 # runs the steps until the run waits or finishes
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from models.kept import keeping
from worker.engine import dispatch
from worker.engine.dispatch import Notice
from worker.engine.runtime import execute
from worker.engine.tasknames import QUEUE_NOTIFY, TASK_NOTIFY, TASK_RESUME, TASK_STEP
from worker.ops.notifications import deliver

DEFAULT_DRAIN_TIMEOUT = 60.0


class DrainTimeoutError(AssertionError):
    """Tasks were still left (or not yet due) when ``drain``'s timeout ran out."""


@dataclass(frozen=True)
class Published:
    """One recorded publish: the task, its run, its queue, when it is due (monotonic), its label;
    a notify task's arguments in ``notice``."""

    name: str
    run_id: str
    queue: str
    due: float
    flow: str = ""
    step: str = ""
    notice: Notice | None = None

    @property
    def resume(self) -> bool:
        return self.name == TASK_RESUME


class TaskRecorder:
    """A publisher that keeps tasks in memory, in publish order, for ``drain`` to execute."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: list[Published] = []
        self.published: list[Published] = []  # every publish ever recorded, drained or not

    def __call__(
        self, name: str, run_id: str, *, queue: str, countdown: float | None, flow: str, step: str
    ) -> None:
        if name not in (TASK_STEP, TASK_RESUME):
            raise ValueError(f"the task recorder cannot execute task {name!r}")
        self._record(
            Published(name, run_id, queue, time.monotonic() + (countdown or 0.0), flow, step)
        )

    def notify(self, notice: Notice, *, countdown: float | None) -> None:
        """The notify-task publisher (``dispatch.NoticePublisher``)."""
        due = time.monotonic() + (countdown or 0.0)
        self._record(
            Published(TASK_NOTIFY, notice.run_id, QUEUE_NOTIFY, due, notice.flow, notice=notice)
        )

    def _record(self, task: Published) -> None:
        with self._lock:
            self._queue.append(task)
            self.published.append(task)

    @property
    def pending(self) -> list[Published]:
        """The tasks recorded and not executed yet, in publish order."""
        with self._lock:
            return list(self._queue)

    def clear(self) -> list[Published]:
        """Forget the pending tasks (as a lost publish would); returns them."""
        with self._lock:
            dropped, self._queue = self._queue, []
        return dropped

    def drain(self, timeout: float = DEFAULT_DRAIN_TIMEOUT) -> int:
        """Execute recorded tasks until none is left; returns how many were executed.

        Tasks run in publish order once due (a retry's countdown is waited for); tasks that
        the executed steps publish are executed too. Exceptions from a step's execution
        propagate. Raises ``DrainTimeoutError`` if tasks remain after ``timeout`` seconds.
        """
        with keeping():  # (this thread keeps its connection between steps, as a worker's does)
            return self._drain(timeout)

    def _drain(self, timeout: float) -> int:
        deadline = time.monotonic() + timeout
        executed = 0
        while True:
            task, wait = self._next_due()
            if task is None and wait is None:
                return executed
            now = time.monotonic()
            if task is None:
                assert wait is not None
                if now + wait > deadline:
                    raise DrainTimeoutError(
                        f"{len(self.pending)} task(s) not due within {timeout}s: {self.pending}"
                    )
                time.sleep(wait)
                continue
            if now > deadline:
                raise DrainTimeoutError(
                    f"tasks still published after {timeout}s and {executed} executed: "
                    f"{self.pending}"
                )
            if task.notice is not None:
                deliver(task.notice)
            else:
                # As a worker does with the task's message, which names the flow.
                execute(task.run_id, flow=task.flow or None)
            executed += 1

    def _next_due(self) -> tuple[Published | None, float | None]:
        """The first due task (taken off the queue), else how long until one is due."""
        with self._lock:
            if not self._queue:
                return None, None
            now = time.monotonic()
            for index, task in enumerate(self._queue):
                if task.due <= now:
                    del self._queue[index]
                    return task, None
            return None, min(t.due for t in self._queue) - now


_active: list[TaskRecorder] = []


@contextmanager
def recording() -> Iterator[TaskRecorder]:
    """Record this process's publishes (instead of sending them) until the block ends."""
    recorder = TaskRecorder()
    previous = dispatch.set_publisher(recorder)
    previous_notices = dispatch.set_notice_publisher(recorder.notify)
    _active.append(recorder)
    try:
        yield recorder
    finally:
        _active.remove(recorder)
        dispatch.set_publisher(previous)
        dispatch.set_notice_publisher(previous_notices)


def drain(timeout: float = DEFAULT_DRAIN_TIMEOUT) -> int:
    """Drain the innermost active ``recording()``: execute its tasks until none is left."""
    if not _active:
        raise RuntimeError("drain() needs an active worker.testing.recording()")
    return _active[-1].drain(timeout)
