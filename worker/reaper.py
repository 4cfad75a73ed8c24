"""Recovering runs whose worker died or whose dispatch was lost; safe in several processes.

Two passes, each one bounded transaction that selects with ``FOR UPDATE SKIP LOCKED`` on
PostgreSQL (SQLite serialises writers) and changes rows only by compare-and-set, so a second
reaper running at the same moment finds nothing left to do. Tasks are published after commit.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from models import runs as store
from models.db import transaction, utcnow
from models.enums import EventKind, RunState
from models.errors import StaleStateError
from models.settings import get_settings
from models.tables import Run
from worker import arguments, dispatch

log = logging.getLogger(__name__)
ACTOR = "system:reaper"
# A run left unclaimed is published again after INTERLUDE_REDISPATCH_AFTER, then after waits
# that double, up to this many times that (a message a restarted broker lost waits no longer).
REDISPATCH_WAIT_LIMIT = 4


def reap(now: datetime | None = None, batch: int | None = None) -> int:
    """Requeue runs with expired leases and republish unclaimed ones; returns how many."""
    settings = get_settings()
    now = arguments.optional_moment("now", now) or utcnow()
    # INTERLUDE_SWEEP_BATCH is already in range (models.settings); a batch given here may not be.
    size = settings.sweep_batch if batch is None else arguments.count("reaper batch", batch)
    handled = _requeue_expired(now, size, settings.max_claims)
    handled += _redispatch_unclaimed(now, size, settings.redispatch_after)
    return handled


def _requeue_expired(now: datetime, batch: int, max_claims: int) -> int:
    """Runs whose owner stopped renewing: back to ``queued``, or ``failed`` after too many."""
    requeued: list[tuple[str, str, str | None]] = []
    failed = 0
    with transaction() as session:
        for run in store.expired_leases(session, now, batch):
            lost = run.lost_leases + 1
            detail = {
                "epoch": run.lease_epoch,
                "owner": run.lease_owner,
                "lost_leases": lost,
                # A later owner waits a grace from here before it settles this owner's effects.
                "lease_expires_at": run.lease_expires_at and run.lease_expires_at.isoformat(),
            }
            try:
                # A savepoint: a lost compare-and-set must leave nothing of its own behind.
                with session.begin_nested():
                    gave_up = _requeue_or_fail(session, run, detail, lost, max_claims, now)
            except StaleStateError:
                continue  # the owner committed or another reaper moved it first
            if gave_up:
                failed += 1
                log.error(
                    "run failed: lease lost %d times",
                    lost,
                    extra={"action": "reap_fail", "run_id": run.id},
                )
                continue
            requeued.append((run.id, run.flow_name, run.next_step))
            log.warning(
                "lease of %s expired; run requeued",
                detail["owner"],
                extra={"action": "requeue", "run_id": run.id},
            )
    for run_id, flow_name, step in requeued:
        dispatch.publish_step(run_id, flow=flow_name, step=step)
    return len(requeued) + failed


def _requeue_or_fail(
    session: Session,
    run: Run,
    detail: dict[str, Any],
    lost: int,
    max_claims: int,
    now: datetime,
) -> bool:
    """Requeue a run whose lease expired, or fail it after too many; True if it failed."""
    if lost > max_claims:
        store.move(
            session,
            run,
            EventKind.FAIL,
            actor=ACTOR,
            detail=detail,
            lost_leases=lost,
            error=f"lease lost {lost} times (limit {max_claims}); last owner {run.lease_owner}",
        )
        return True
    store.move(
        session,
        run,
        EventKind.REQUEUE,
        actor=ACTOR,
        detail=detail,
        lost_leases=lost,
        lease_owner=None,
        lease_expires_at=None,
        dispatched_at=now,
    )
    return False


def _redispatch_unclaimed(now: datetime, batch: int, redispatch_after: float) -> int:
    """Runs due to be claimed whose task was published long ago (or lost): publish again."""
    cutoff = now - timedelta(seconds=redispatch_after)
    due: list[tuple[str, bool, str, str | None]] = []
    with transaction() as session:
        unclaimed = store.unclaimed(
            session,
            now=now,
            first_wait=redispatch_after,
            longest_wait=redispatch_after * REDISPATCH_WAIT_LIMIT,
            batch=batch,
        )
        for run_id, state, version, flow_name, step in unclaimed:
            # The conditional update elects one reaper per stale dispatch.
            if store.mark_redispatched(
                session, run_id, state_version=version, cutoff=cutoff, now=now
            ):
                # Explains, in the run's timeline, a gap between its dispatch and its claim.
                store.record_event(
                    session,
                    run_id,
                    actor=ACTOR,
                    kind=EventKind.REPUBLISH,
                    detail={"state": state, "unclaimed_since_before": cutoff.isoformat()},
                    at=now,
                )
                due.append((run_id, state == RunState.RESUMING.value, flow_name, step))
    failed = []
    for run_id, resuming, flow_name, step in due:
        log.warning(
            "run unclaimed since before %s; republished",
            cutoff.isoformat(),
            extra={"action": "redispatch", "run_id": run_id},
        )
        if not dispatch.publish_step(run_id, flow=flow_name, step=step, resume=resuming):
            failed.append(run_id)
    if failed:
        with transaction() as session:
            store.forget_dispatch(session, failed, at=now)
    return len(due)
