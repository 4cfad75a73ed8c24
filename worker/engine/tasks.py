"""Thin Celery tasks: each passes a run id to the code that does the work."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from celery.exceptions import Retry
from celery.signals import (
    after_setup_logger,
    after_setup_task_logger,
    celeryd_after_setup,
    worker_init,
    worker_process_init,
    worker_ready,
    worker_shutdown,
)

from models.db import open_pool, size_pool_for
from models.errors import NotifierFailedError, StepFailedError
from models.kept import keep_connections
from models.settings import get_settings
from worker.app import app
from worker.engine.heap import freeze_inherited_heap, freeze_startup_heap
from worker.engine.tasknames import (
    FLOW_HEADER,
    TASK_NOTIFY,
    TASK_REAP,
    TASK_RESUME,
    TASK_STEP,
    TASK_SWEEP,
)
from worker.ops import runlog, step_metrics, tracing
from worker.ops.stats import serve_from_worker

if TYPE_CHECKING:
    from worker.engine.commits import Failure
    from worker.engine.dispatch import Notice
    from worker.ops.notifications import Delivery

# The error a failed task carries into Flower and the worker's log (the run keeps all of it).
MAX_TASK_ERROR = 500
# Expected errors: the task fails, logged on one line at INFO without a traceback.
EXPECTED = (StepFailedError,)


# The request class in the worker's main process: a pool child that dies mid-step has its run
# requeued at once (worker.engine.child_lost).
STEP_REQUEST = "worker.engine.child_lost:StepRequest"


@app.task(name=TASK_STEP, ignore_result=True, throws=EXPECTED, Request=STEP_REQUEST)  # type: ignore[untyped-decorator]
def run_step(run_id: str) -> None:
    from worker.engine.runtime import execute

    report(execute(run_id, flow=flow_named_by(run_step)))


@app.task(name=TASK_RESUME, ignore_result=True, throws=EXPECTED, Request=STEP_REQUEST)  # type: ignore[untyped-decorator]
def resume_run(run_id: str) -> None:
    """Continue an accepted resume: fresh lease and epoch, settle effects, run the step."""
    from worker.engine.runtime import execute

    report(execute(run_id, flow=flow_named_by(resume_run)))


def flow_named_by(task: Any) -> str | None:
    """The flow the task's message was published for (its ``FLOW_HEADER``), if it names one."""
    flow = task.request.get(FLOW_HEADER)
    return flow if isinstance(flow, str) and flow else None


def report(failure: Failure | None) -> None:
    """End the task as Flower should show it, once the step's failure is committed.

    A failure to be retried ends it as RETRY: interlude has already published the next attempt
    itself (the run row says when), so this raises Celery's ``Retry`` without ``Task.retry``,
    which would publish a second copy. A failure for good ends it as FAILURE. Either carries
    the step's own frames (Flower's traceback ends where the step raised, not here).
    """
    if failure is None:
        return
    error = failure.error
    if len(error) > MAX_TASK_ERROR:
        error = error[: MAX_TASK_ERROR - 1] + "…"
    exc = StepFailedError(
        run_id=failure.run_id,
        flow=failure.flow,
        step=failure.step,
        attempt=failure.attempt,
        error=error,
    )
    if failure.retry_in is not None:
        raise Retry(exc=exc, when=failure.retry_in).with_traceback(failure.traceback)
    raise exc.with_traceback(failure.traceback)


# Its time limits come from the settings (worker.app). A call that outlives the hard limit, or
# whose pool child dies, is not run again (for the hard limit, Celery acknowledges the task
# itself): a notifier that kills its process would loop for ever, where a step's attempts are
# counted on its run. Celery's own error lines say so; the notification stays owed, and the
# reaper publishes it again once overdue, as its next attempt (the attempts bound that loop).
@app.task(  # type: ignore[untyped-decorator]
    name=TASK_NOTIFY,
    ignore_result=True,
    throws=(NotifierFailedError,),
    reject_on_worker_lost=False,
)
def notify_interrupt(
    interrupt_id: str, run_id: str, flow: str, version: int, notifier: str, attempt: int = 1
) -> None:
    """Call one flow notifier with one interrupt, if it is still pending
    (worker.ops.notifications)."""
    from worker.engine.dispatch import Notice
    from worker.ops.notifications import deliver

    notice = Notice(interrupt_id, run_id, flow, version, notifier, attempt)
    report_delivery(notice, deliver(notice))


def report_delivery(notice: Notice, delivery: Delivery) -> None:
    """End a notify task as Flower should show it: RETRY when interlude published the next
    attempt itself (as for steps, without ``Task.retry``), FAILURE when there is none."""
    from worker.ops.notifications import Outcome

    if delivery.outcome not in (Outcome.RETRYING, Outcome.FAILED):
        return
    exc = NotifierFailedError(
        notifier=notice.notifier,
        interrupt_id=notice.interrupt_id,
        attempt=notice.attempt,
        error=delivery.error,
    )
    if delivery.retry_in is not None:
        raise Retry(exc=exc, when=delivery.retry_in)
    raise exc


@app.task(name=TASK_SWEEP, ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_expired() -> int:
    from worker.engine.sweeps import sweep_expired as sweep

    return sweep()


@app.task(name=TASK_REAP, ignore_result=True)  # type: ignore[untyped-decorator]
def reap() -> int:
    from worker.engine.reaper import reap as reap_runs

    return reap_runs()


# Celery configures the handlers; ours name the run on every line (or write JSON).
after_setup_logger.connect(runlog.install)
after_setup_task_logger.connect(runlog.install)
# With INTERLUDE_METRICS_PORT: the worker's own step metrics, served once it is ready.
worker_ready.connect(serve_from_worker)
# Start-up's objects out of full collections (worker.engine.heap): in the main process once it is
# ready, and in each pool child once forked (the flows were frozen before the fork).
worker_ready.connect(freeze_startup_heap)
worker_process_init.connect(freeze_inherited_heap)


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _trace_in_child(**_: Any) -> None:
    """Celery's own instrumentation, per process (INTERLUDE_TRACING; worker.ops.tracing)."""
    tracing.instrument_celery()


@worker_process_init.connect  # type: ignore[untyped-decorator]
def _keep_connection_in_child(**_: Any) -> None:
    """A prefork pool child runs its steps one after another in its one thread: it keeps its
    connection between single-statement transactions (models.kept). The parent, which forks
    the children, never does.

    The child connects now, before its first task: connecting and SQLAlchemy's first look at
    the server took 50 to 60 ms of the first step after every start or replaced child (the first
    task's 81 to 95 ms against 30 to 38 ms, three W1 runs each). An unreachable database is not an
    error here: the first step then connects, or fails, as before."""
    keep_connections()
    open_pool(1)


worker_shutdown.connect(step_metrics.cleanup_worker)


@celeryd_after_setup.connect  # type: ignore[untyped-decorator]
def _wait_for_database(**_: Any) -> None:
    """Take no task until the database answers at the schema's newest revision (once logging
    is set up, before the pool starts and anything is consumed): worker.engine.readiness."""
    from worker.engine.readiness import wait_for_database

    wait_for_database()


@worker_init.connect  # type: ignore[untyped-decorator]
def _load_flows(sender: Any = None, **_: Any) -> None:
    """Import the flow modules (and the step runtime) once in the parent, before the pool forks.

    Every pool child then starts ready; otherwise each new child (say, after one was killed)
    pays for these imports on its first task. A pool of threads (or greenlets) runs its steps
    in this one process: its database pool gets a connection for each, opened now.
    """
    from models.errors import ConfigurationError
    from worker.engine import runtime  # noqa: F401
    from worker.flows.flow import load_flow_modules
    from worker.startup import project_on_path, refuse

    # Before the flows are imported and the pool starts: its processes count into shared files.
    step_metrics.prepare_worker(get_settings().metrics_port)
    project_on_path()
    try:
        load_flow_modules()
    except ConfigurationError as exc:
        # A worker that cannot load its flows must not say "ready.": it would fail every step.
        refuse(exc)
    concurrency = getattr(sender, "concurrency", None)
    pool = str(getattr(sender, "pool_cls", "")).lower()
    if isinstance(concurrency, int) and any(p in pool for p in ("thread", "gevent", "eventlet")):
        size_pool_for(concurrency)
        open_pool(concurrency)
    if "solo" in pool:
        # Steps run one after another in this process's one thread: it keeps its connection
        # between single-statement transactions (models.kept). Not a threads pool: there each
        # thread would keep one of fifty server backends busy where the pool (last in, first
        # out) keeps a few warm, and W4 measured that the server's extra work outweighs the
        # worker's saving (docs/explanation/performance.md). Not greenlets either: one lives
        # for a task.
        keep_connections()
    # Before the pool forks: its children inherit these objects frozen (worker.engine.heap).
    freeze_startup_heap()
