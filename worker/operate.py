"""What operators do to runs beyond cancel and pause: retry a failed run, wait for a run, and
select runs in bulk. Application code may call these as well."""

from __future__ import annotations

import time
from datetime import datetime

from models import operator_queries
from models import runs as store
from models.contracts import RunSummary, RunView
from models.db import transaction, utcnow
from models.enums import EventKind, RunState
from models.errors import InvalidInputError, InvalidTransitionError, WaitTimeoutError
from worker import dispatch
from worker.runs import MAX_KEY, get_run

# Polling the run row is the whole of waiting: nothing else needs to be running.
FIRST_POLL = 0.1
MAX_POLL = 1.0


def retry_run(run_id: str, *, actor: str, reason: str = "") -> None:
    """A failed run continues from its last checkpoint: its failed step runs again.

    Refused (InvalidTransitionError) unless the run is ``failed``; recorded as a ``restart``
    event with the actor and the error it had.
    """
    _check_actor(actor, "retry")
    with transaction() as session:
        run = store.load_run(session, run_id)
        if run.state != RunState.FAILED.value:
            raise InvalidTransitionError(run_id=run_id, trigger="retry", found=run.state)
        store.move(
            session,
            run,
            EventKind.RESTART,
            actor=actor,
            detail={"reason": reason, "error": run.error, "step": run.next_step},
            error=None,
            finished_at=None,
            step_attempts=0,
            lost_leases=0,
            not_before=None,
            dispatched_at=utcnow(),
        )
    dispatch.publish_step(run_id, flow=run.flow_name, step=run.next_step)


def wait_for_run(run_id: str, timeout: float | None = None) -> RunView:
    """Block until the run is finished (succeeded, failed, expired or cancelled) and return it.

    Raises WaitTimeoutError when ``timeout`` seconds pass first; RunNotFoundError at once.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    pause = FIRST_POLL
    while True:
        run = get_run(run_id)
        if RunState(run.state).terminal:
            return run
        if deadline is not None and time.monotonic() >= deadline:
            raise WaitTimeoutError(run_id=run_id, timeout=timeout, state=run.state)
        left = None if deadline is None else deadline - time.monotonic()
        time.sleep(max(0.0, min(pause, left if left is not None else pause)))
        pause = min(pause * 2, MAX_POLL)


def find_runs(
    *,
    state: RunState | str | None = None,
    flow: str | None = None,
    started_by: str | None = None,
    started_before: datetime | None = None,
    limit: int | None = 100,
) -> list[RunSummary]:
    """Runs matching every given filter, newest first (``limit=None``: all of them)."""
    wanted = _state(state)
    with transaction(readonly=True) as session:
        rows = operator_queries.select_runs(
            session,
            state=wanted,
            flow=flow,
            started_by=started_by,
            created_before=started_before,
            limit=limit,
        )
        return [RunSummary.model_validate(row, from_attributes=True) for row in rows]


def _state(state: RunState | str | None) -> RunState | None:
    if state is None:
        return None
    try:
        return RunState(state)
    except ValueError:
        allowed = ", ".join(s.value for s in RunState)
        raise InvalidInputError(detail=f"unknown state {state!r}; one of {allowed}") from None


def _check_actor(actor: object, verb: str) -> None:
    if not isinstance(actor, str) or not 0 < len(actor) <= MAX_KEY:
        raise InvalidInputError(detail=f"{verb} needs an actor of 1 to {MAX_KEY} characters")
