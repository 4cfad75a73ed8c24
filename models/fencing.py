"""When an old owner's lease ended, for a later owner that finds its effect unsettled.

The later owner waits out a grace from that moment before it believes any answer about the
old owner's call (``worker.engine.fencing``).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from models.db import dialect
from models.dialects import Dialect
from models.enums import EventKind
from models.statements import named
from models.tables import Event


def stale_lease_end(session: Session, run_id: str, epoch: int) -> datetime | None:
    """When the lease of ``epoch`` ended at the latest, from the run's audit trail.

    The reaper's requeue of that epoch names the expiry it saw (older trails: the requeue
    itself); failing that, the claim of the next epoch, which could only follow the end of the
    old lease. None if the trail shows neither (the epoch is still current).
    """
    return stale_lease(session, run_id, epoch)[0]


def stale_lease(session: Session, run_id: str, epoch: int) -> tuple[datetime | None, bool]:
    """``stale_lease_end``, and whether that owner gave the run back itself (a requeue marked
    ``released``): its calls had all returned then, so none of them can land later."""
    rows = session.execute(dialect(session).built(EVENT_LEASE_ENDS), {"run_id": run_id}).all()
    ends: list[datetime] = []
    for trigger, at, detail in rows:
        detail = detail if isinstance(detail, dict) else {}
        if trigger == EventKind.REQUEUE and detail.get("epoch") == epoch:
            seen = detail.get("lease_expires_at")
            ended = datetime.fromisoformat(seen) if isinstance(seen, str) else at
            return ended, detail.get("released") is True
        later = isinstance(detail.get("epoch"), int) and detail["epoch"] > epoch
        if trigger == EventKind.CLAIM and later:
            ends.append(at)
    return (ends[0] if ends else None), False


@named("event.lease_ends")
def EVENT_LEASE_ENDS(d: Dialect) -> Any:
    """Read a run's requeues and claims, in order, to tell when an old lease ended
    (``stale_lease_end``: ``ctx.effect`` that finds an older owner's intent unsettled)."""
    return (
        select(Event.trigger, Event.at, Event.detail)
        .where(
            Event.run_id == bindparam("run_id"),
            Event.trigger.in_((EventKind.REQUEUE, EventKind.CLAIM)),
        )
        .order_by(Event.id)
    )
