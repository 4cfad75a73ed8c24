"""Recovering runs whose worker died or whose dispatch was lost, and notifications whose task
was lost; safe in several processes.

Three stages, each in batches: one bounded transaction that selects with ``FOR UPDATE SKIP
LOCKED`` on PostgreSQL (SQLite serialises writers) and changes rows only by compare-and-set,
so a second reaper running at the same moment finds nothing left to do. Tasks are published
after commit. The last stage (``worker.ops.notifications.republish_overdue``) does one batch
per pass, of at most ``NOTIFY_REPUBLISH_AT_MOST``: a backlog of lost notifications goes out at
a bounded rate.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from models import events as event_store
from models import recovery as recovery_store
from models import runs as run_store
from models.db import transaction, utcnow
from models.enums import EventKind, RunState
from models.errors import StaleStateError
from models.settings import get_settings
from models.tables import Run
from worker import arguments
from worker.engine import dispatch
from worker.ops.notifications import republish_overdue

log = logging.getLogger(__name__)
ACTOR = "system:reaper"
# A run left unclaimed is published again after INTERLUDE_REDISPATCH_AFTER, then after waits
# that double, up to this many times that (a message a restarted broker lost waits no longer).
REDISPATCH_WAIT_LIMIT = 4
# Overdue notifications published again per reaper pass, at most.
NOTIFY_REPUBLISH_AT_MOST = 100


@dataclass
class _Batch:
    selected: int = 0
    handled: int = 0
    # The broker refused a publish: the pass ends, and the next one publishes the rest.
    refused: bool = False


def reap(now: datetime | None = None, batch: int | None = None) -> int:
    """Requeue runs with expired leases, republish unclaimed ones and overdue notifications;
    returns how many.

    Each stage goes on batch after batch (``INTERLUDE_SWEEP_BATCH`` rows, or ``batch``) until
    one comes back short, as the sweep does. A pass starts no new batch once it has run for
    one beat interval (``INTERLUDE_REAP_INTERVAL``): beat has sent the next pass by then (its
    task expires after that interval), and it goes on where this one stopped. Each stage does
    one batch at least. A publish the broker refuses ends the pass: the runs not published
    are due again at the next one.
    """
    settings = get_settings()
    given = arguments.optional_moment("now", now)
    # INTERLUDE_SWEEP_BATCH is already in range (models.settings); a batch given here may not be.
    size = settings.sweep_batch if batch is None else arguments.count("reaper batch", batch)
    stop_at = time.monotonic() + settings.reap_interval
    stages: tuple[Callable[[datetime], _Batch], ...] = (
        lambda at: _requeue_expired(at, size, settings.max_claims),
        lambda at: _redispatch_unclaimed(at, size, settings.redispatch_after),
    )
    handled = 0
    for stage in stages:
        while True:
            # Each batch at its own moment (unless one was given): the dispatch it records is
            # when its tasks went out, not when a long pass began.
            result = stage(given or utcnow())
            handled += result.handled
            if result.refused:
                return handled  # the broker is down: the next pass tries again
            if result.selected < size or time.monotonic() >= stop_at:
                break
    notified, _ = republish_overdue(given or utcnow(), min(size, NOTIFY_REPUBLISH_AT_MOST))
    return handled + notified


def _requeue_expired(now: datetime, batch: int, max_claims: int) -> _Batch:
    """Runs whose owner stopped renewing: back to ``queued``, or ``failed`` after too many."""
    result = _Batch()
    requeued: list[tuple[str, str, str | None]] = []
    failed = 0
    with transaction() as session:
        expired, unreadable = recovery_store.expired_leases(session, now, batch)
        result.selected = len(expired) + len(unreadable)
        for run_id, why in unreadable.items():
            # Left as it is, for an operator: a run that cannot be read cannot be run either.
            log.error(
                "lease expired but the run cannot be read, left as it is: %s",
                why,
                extra={"action": "requeue_unreadable", "run_id": run_id},
            )
        for run in expired:
            lost = run.lost_leases + 1
            detail = _lost_lease(run, lost)
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
    result.handled = len(requeued) + failed
    # (Queued all the same if refused: the next pass republishes them.)
    tasks = [(run_id, False, flow_name, step) for run_id, flow_name, step in requeued]
    result.refused = not _publish(tasks, now)
    return result


def requeue_lost(run_id: str, owner: str) -> bool:
    """The run ``owner`` was running when its process died (a pool child killed mid-step):
    requeued now, as the reaper would once the lease expired; True if it was moved.

    Only a process that saw ``owner`` die may say so (the worker's main process, of its own
    pool child): a live owner's lease must never be cut short. What the dead owner left of an
    effect is settled as after an expiry: the lease it had is recorded, and its grace counts
    from there.
    """
    now = utcnow()
    with transaction() as session:
        run = recovery_store.held_by(session, run_id, owner)
        if run is None:
            return False  # it committed, or the reaper (or another pass) moved it first
        lost = run.lost_leases + 1
        detail = {**_lost_lease(run, lost), "note": "its process died"}
        try:
            with session.begin_nested():
                gave_up = _requeue_or_fail(
                    session, run, detail, lost, get_settings().max_claims, now
                )
        except StaleStateError:
            return False
    log.warning(
        "process %s died running the step; run %s",
        owner,
        "failed: lease lost too many times" if gave_up else "requeued at once",
        extra={"action": "reap_fail" if gave_up else "requeue", "run_id": run_id},
    )
    return True


def _lost_lease(run: Run, lost: int) -> dict[str, Any]:
    """The requeue's (or failure's) record of the lease ``run`` lost, its ``lost``-th."""
    return {
        "epoch": run.lease_epoch,
        "owner": run.lease_owner,
        "lost_leases": lost,
        # A later owner waits a grace from here before it settles this owner's effects.
        "lease_expires_at": run.lease_expires_at and run.lease_expires_at.isoformat(),
    }


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
        run_store.move(
            session,
            run,
            EventKind.FAIL,
            actor=ACTOR,
            detail=detail,
            lost_leases=lost,
            error=f"lease lost {lost} times (limit {max_claims}); last owner {run.lease_owner}",
        )
        return True
    run_store.move(
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


def _redispatch_unclaimed(now: datetime, batch: int, redispatch_after: float) -> _Batch:
    """Runs due to be claimed whose task was published long ago (or lost): publish again."""
    cutoff = now - timedelta(seconds=redispatch_after)
    due: list[dispatch.StepTask] = []
    result = _Batch()
    with transaction() as session:
        unclaimed = recovery_store.unclaimed(
            session,
            now=now,
            first_wait=redispatch_after,
            longest_wait=redispatch_after * REDISPATCH_WAIT_LIMIT,
            batch=batch,
        )
        result.selected = len(unclaimed)
        for run_id, state, version, flow_name, step in unclaimed:
            # The conditional update elects one reaper per stale dispatch.
            if recovery_store.mark_redispatched(
                session, run_id, state_version=version, cutoff=cutoff, now=now
            ):
                # Explains, in the run's timeline, a gap between its dispatch and its claim.
                event_store.record_event(
                    session,
                    run_id,
                    actor=ACTOR,
                    kind=EventKind.REPUBLISH,
                    detail={"state": state, "unclaimed_since_before": cutoff.isoformat()},
                    at=now,
                )
                due.append((run_id, state == RunState.RESUMING.value, flow_name, step))
    result.handled = len(due)

    def republished(run_id: str) -> None:
        log.warning(
            "run unclaimed since before %s; republished",
            cutoff.isoformat(),
            extra={"action": "redispatch", "run_id": run_id},
        )

    # A republish the broker refused does not count: due again at the next pass.
    result.refused = not _publish(due, now, republished)
    return result


def _publish(
    tasks: list[dispatch.StepTask], now: datetime, sent: Callable[[str], None] | None = None
) -> bool:
    """Publish ``tasks`` in order (``dispatch.publish_until_refused``); False if the broker
    refused one. The runs not published have their dispatch forgotten, so that the next pass
    publishes them without waiting for a dispatch that never went out."""
    unsent = dispatch.publish_until_refused(tasks, sent)
    if not unsent:
        return True
    if len(unsent) > 1:
        log.warning(
            "%d more run(s) left for the next reaper pass",
            len(unsent) - 1,
            extra={"action": "publish_deferred"},
        )
    with transaction() as session:
        recovery_store.forget_dispatch(session, unsent, at=now)
    return False
