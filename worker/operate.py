"""What operators do to runs beyond cancel and pause: retry a failed run, wait for a run, and
select runs in bulk. Application code may call these as well; retry, like cancel and pause,
authenticates its actor (``worker.gateway.authority``)."""

from __future__ import annotations

import math
import time
from datetime import datetime

from models import operator_queries
from models import runs as run_store
from models.contracts import RunSummary, RunView
from models.db import transaction, utcnow
from models.enums import EventKind, RunState
from models.errors import (
    InvalidInputError,
    InvalidTransitionError,
    OperatorRefusedError,
    WaitTimeoutError,
)
from models.identity import normal_actor_id
from worker import arguments
from worker.engine import dispatch
from worker.gateway import authority
from worker.gateway.actors import Credential
from worker.gateway.authority import ActorType
from worker.runs import checked_reason, get_run

# Polling the run row is the whole of waiting: nothing else needs to be running.
FIRST_POLL = 0.1
MAX_POLL = 1.0


def retry_run(
    run_id: str,
    *,
    actor: str,
    credential: str,
    reason: str = "",
    actor_type: ActorType = "human",
) -> str:
    """A failed run continues from its last checkpoint: its failed step runs again.

    ``actor`` must authenticate with ``credential`` and hold one of the flow's operator roles
    (else OperatorUnauthenticatedError / OperatorDeniedError, recorded, nothing else
    changed). Refused (InvalidTransitionError) unless the run is ``failed``; recorded as a
    ``restart`` event with the actor (``kind:id``, returned) and the error it had.
    """
    secret = Credential(credential)
    del credential
    who = authority.claim("retry", actor, actor_type)
    checked_reason("retry", reason)
    try:
        with transaction() as session:
            run = authority.authorize(session, run_id, who, secret)
            if run.state != RunState.FAILED.value:
                raise InvalidTransitionError(run_id=run_id, trigger="retry", found=run.state)
            run_store.move(
                session,
                run,
                EventKind.RESTART,
                actor=who.label,
                detail={"reason": reason, "error": run.error, "step": run.next_step},
                error=None,
                finished_at=None,
                step_attempts=0,
                lost_leases=0,
                not_before=None,
                dispatched_at=utcnow(),
            )
    except OperatorRefusedError as refusal:
        authority.record_refusal(refusal, who)
        raise
    dispatch.publish_step(run_id, flow=run.flow_name, step=run.next_step)
    return who.label


def wait_for_run(run_id: str, timeout: float | None = None) -> RunView:
    """Block until the run is finished (succeeded, failed, expired or cancelled) and return it.

    Raises WaitTimeoutError when ``timeout`` seconds pass first; RunNotFoundError at once.
    """
    if timeout is not None and (
        isinstance(timeout, bool)
        or not isinstance(timeout, int | float)
        or not math.isfinite(timeout)
        or timeout < 0
    ):
        # NaN compares false with every deadline: the wait would never end.
        raise InvalidInputError(
            detail=f"timeout must be a finite number of seconds, got {timeout!r}"
        )
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
    # Checked here, not left to the driver: each backend fails (or matches nothing) differently.
    flow = arguments.optional_text("flow", flow)
    started_by = arguments.optional_text("started_by", started_by)
    if started_by is not None:
        # Stored in its normal form (enqueue_run): `Alice` finds alice's runs.
        started_by = normal_actor_id(started_by)
    started_before = arguments.optional_moment("started_before", started_before)
    limit = arguments.optional_count("limit", limit)
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
