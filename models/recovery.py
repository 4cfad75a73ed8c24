"""The reaper's store: runs whose lease expired, whose owner died or whose dispatch went
unclaimed, and the republishes made of them."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import Float, Integer, and_, bindparam, or_, select, update
from sqlalchemy.orm import Session

from models.db import dialect, readable_rows
from models.dialects import Dialect
from models.enums import RunState
from models.runs import RUNS
from models.statements import named
from models.tables import Run
from statemachine import CLAIMABLE


def expired_leases(session: Session, now: datetime, batch: int) -> tuple[list[Run], dict[str, str]]:
    """Running runs whose owner stopped renewing, oldest first, and the ids of those that could
    not be read, with why (``readable_rows``); rows others hold are skipped."""
    query = dialect(session).built(RUN_EXPIRED_LEASES)
    return readable_rows(session, query, {"now": now, "batch": batch})


def _at(name: str) -> Any:
    """A timestamp parameter (aware UTC, as the columns hold them)."""
    return bindparam(name, type_=RUNS.c.updated_at.type)


@named("run.expired_leases")
def RUN_EXPIRED_LEASES(d: Dialect) -> Any:
    """Select a batch of running runs whose lease expired, oldest first, skipping rows others
    hold (``expired_leases``: the reaper, to requeue them)."""
    query = (
        select(Run)
        .where(Run.state == RunState.RUNNING.value, Run.lease_expires_at < _at("now"))
        .order_by(Run.lease_expires_at)
        .limit(bindparam("batch", type_=Integer))
    )
    return d.lock_or_skip(query)


def held_by(session: Session, run_id: str, owner: str) -> Run | None:
    """``run_id``, locked, if it is running under ``owner``'s lease (whatever its expiry)."""
    params = {"run_id": run_id, "owner": owner}
    found: Run | None = session.execute(
        dialect(session).built(RUN_HELD_BY), params
    ).scalar_one_or_none()
    return found


@named("run.held_by")
def RUN_HELD_BY(d: Dialect) -> Any:
    """Read and lock a run if it is running under an owner's lease (``held_by``: the worker's
    main process requeues the run of a pool child it saw die)."""
    query = select(Run).where(
        Run.id == bindparam("run_id"),
        Run.state == RunState.RUNNING.value,
        Run.lease_owner == bindparam("owner"),
    )
    return d.lock(query)


def unclaimed(
    session: Session, *, now: datetime, first_wait: float, longest_wait: float, batch: int
) -> list[tuple[str, str, int, str, str | None]]:
    """``(id, state, version, flow, next step)`` of claimable runs due to be published again.

    A run is due ``first_wait`` seconds after its dispatch; each republish then waits as long
    as the run had gone unclaimed when it was made (its dispatch less its last transition,
    ``updated_at``), so the waits double, up to ``longest_wait``. A backlog that only makes
    runs wait their turn then costs a duplicate message per doubling and one per
    ``longest_wait`` after, not one per ``first_wait``; a message truly lost is still sent
    again after ``first_wait``, and one a restarted broker lost after ``longest_wait`` at most.
    """
    params = {
        "now": now,
        "now_seconds": now.timestamp(),
        "first_cutoff": now - timedelta(seconds=first_wait),
        "longest_cutoff": now - timedelta(seconds=longest_wait),
        "batch": batch,
    }
    rows = session.execute(dialect(session).built(RUN_UNCLAIMED), params).all()
    return [
        (str(r.id), str(r.state), int(r.state_version), str(r.flow_name), r.next_step) for r in rows
    ]


@named("run.unclaimed")
def RUN_UNCLAIMED(d: Dialect) -> Any:
    """Select a batch of claimable runs whose dispatch is due again (waits doubling), oldest
    dispatch first, skipping rows others hold (``unclaimed``: the reaper, to republish)."""
    dispatched = Run.dispatched_at
    doubled = 2 * d.epoch_seconds(dispatched) - d.epoch_seconds(Run.updated_at) <= bindparam(
        "now_seconds", type_=Float
    )
    query = (
        select(Run.id, Run.state, Run.state_version, Run.flow_name, Run.next_step)
        .where(
            Run.state.in_(CLAIMABLE),
            or_(
                dispatched.is_(None),
                and_(
                    dispatched < _at("first_cutoff"),
                    or_(dispatched < _at("longest_cutoff"), doubled),
                ),
            ),
            or_(Run.not_before.is_(None), Run.not_before <= _at("now")),
        )
        .order_by(dispatched)
        .limit(bindparam("batch", type_=Integer))
    )
    return d.lock_or_skip(query)


def forget_dispatch(session: Session, run_ids: Collection[str], *, at: datetime) -> None:
    """The republishes of ``run_ids`` made ``at`` failed: due again at the reaper's next pass.

    Without this a publish refused by a broker that is down would count as one made, and the
    run would wait out its doubled wait after the broker is back. Only rows still carrying
    that dispatch change.
    """
    params = {"run_ids": list(run_ids), "at": at}
    session.execute(dialect(session).built(RUN_FORGET_DISPATCH), params)


@named("run.forget_dispatch")
def RUN_FORGET_DISPATCH(d: Dialect) -> Any:
    """Clear the dispatch of runs still carrying one made at a moment (``forget_dispatch``:
    the reaper, when the broker refused its republishes)."""
    return (
        update(RUNS)
        .where(
            RUNS.c.id.in_(bindparam("run_ids", expanding=True)),
            RUNS.c.dispatched_at == _at("at"),
        )
        .values(dispatched_at=None)
    )


def mark_redispatched(
    session: Session, run_id: str, *, state_version: int, cutoff: datetime, now: datetime
) -> bool:
    """Record a republish of an unclaimed run, only if nobody moved or republished it since.

    The reaper publishes only when this returns True, so two reapers never both republish.
    """
    params = {"run_id": run_id, "seen_version": state_version, "cutoff": cutoff, "now": now}
    result = session.execute(dialect(session).built(RUN_MARK_REDISPATCHED), params)
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


@named("run.mark_redispatched")
def RUN_MARK_REDISPATCHED(d: Dialect) -> Any:
    """Record a republish of a claimable run by compare-and-set on its version and its last
    dispatch (``mark_redispatched``: the reaper, so that two reapers never both republish)."""
    return (
        update(RUNS)
        .where(
            RUNS.c.id == bindparam("run_id"),
            RUNS.c.state_version == bindparam("seen_version"),
            RUNS.c.state.in_(CLAIMABLE),
            (RUNS.c.dispatched_at.is_(None)) | (RUNS.c.dispatched_at < _at("cutoff")),
        )
        .values(dispatched_at=_at("now"))
    )
