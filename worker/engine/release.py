"""Giving a run back at once when the database failed its step for a moment.

A lost connection, a restarting server or a serialization failure is no fault of the step:
counting it as one of the step's attempts would fail a run that allows no retry, and leaving
the run to the reaper would hold it until its lease expired. Instead the worker requeues the
run itself, fenced on its epoch, with the outcomes of the effects its step made (so that the
next execution skips them, with no reconciliation), and publishes the step again.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from sqlalchemy.exc import DBAPIError

from models import runs as run_store
from models.db import retrying, transaction, utcnow
from models.db_errors import describe, is_transient
from models.enums import EventKind
from models.errors import FencedError, StaleStateError
from models.settings import get_settings
from models.statements import Write
from models.tables import Run
from worker.engine import dispatch

log = logging.getLogger(__name__)


def give_back(
    run: Run,
    *,
    epoch: int,
    step: str,
    outcomes: Sequence[Write],
    owner: str,
    exc: DBAPIError,
    within: float,
) -> bool:
    """Requeue ``run`` from ``owner``'s lease at ``epoch`` and publish ``step`` again; True if
    this process gave it back.

    Tried while the database comes back, for at most ``within`` seconds (the lease): after
    that the reaper hands the run on as a dead worker's. Each give-back counts as a lost
    lease, so a step that meets such errors every time fails after INTERLUDE_MAX_CLAIMS.
    """
    error = describe(exc) or type(exc).__name__
    now, lost = utcnow(), run.lost_leases + 1
    gave_up = lost > get_settings().max_claims
    detail = {
        "epoch": epoch,
        "owner": owner,
        "lost_leases": lost,
        # Given back by the owner itself, its calls returned: a later owner waits no grace.
        "lease_expires_at": now.isoformat(),
        "released": True,
        "step": step,
        "error": error,
    }
    actor = f"worker:{owner}"

    def commit() -> None:
        with transaction(autocommit=True) as session:
            if gave_up:
                run_store.move(
                    session,
                    run,
                    EventKind.FAIL,
                    actor=actor,
                    detail=detail,
                    fence_epoch=epoch,
                    writes=outcomes,
                    lost_leases=lost,
                    error=f"{error} ({lost} times in a row)",
                )
                return
            run_store.move(
                session,
                run,
                EventKind.REQUEUE,
                actor=actor,
                detail=detail,
                fence_epoch=epoch,
                writes=outcomes,
                lost_leases=lost,
                lease_owner=None,
                lease_expires_at=None,
                dispatched_at=now,
            )

    try:
        retrying(commit, within=within)
    except (FencedError, StaleStateError):
        return False  # another owner, or the reaper, moved it first
    except DBAPIError as again:
        if not is_transient(again):
            raise
        log.warning(
            "step %s met a database error and the database is still away (%s): the reaper "
            "hands the run on when its lease expires",
            step,
            describe(again),
            extra={"action": "release_failed", "run_id": run.id},
        )
        return False
    if gave_up:
        log.error(
            "run failed: step %s met database errors %d times in a row: %s",
            step,
            lost,
            error,
            extra={"action": "run_failed", "run_id": run.id},
        )
        return True
    log.warning(
        "step %s met a database error, run given back to be executed again at once: %s",
        step,
        error,
        extra={"action": "release", "run_id": run.id},
    )
    dispatch.publish_step(run.id, flow=run.flow_name, step=step)
    return True
