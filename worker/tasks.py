"""Thin Celery tasks: each passes a run id to the code that does the work."""

from __future__ import annotations

from worker.app import TASK_REAP, TASK_RESUME, TASK_STEP, TASK_SWEEP, app
from worker.stats import serve_from_worker  # noqa: F401  (serves metrics if configured)


@app.task(name=TASK_STEP, ignore_result=True)  # type: ignore[untyped-decorator]
def run_step(run_id: str) -> None:
    from worker.runtime import execute

    execute(run_id)


@app.task(name=TASK_RESUME, ignore_result=True)  # type: ignore[untyped-decorator]
def resume_run(run_id: str) -> None:
    """Continue an accepted resume: fresh lease and epoch, settle effects, run the step."""
    from worker.runtime import execute

    execute(run_id)


@app.task(name=TASK_SWEEP, ignore_result=True)  # type: ignore[untyped-decorator]
def sweep_expired() -> int:
    from worker.sweeps import sweep_expired as sweep

    return sweep()


@app.task(name=TASK_REAP, ignore_result=True)  # type: ignore[untyped-decorator]
def reap() -> int:
    from worker.reaper import reap as reap_runs

    return reap_runs()
