"""Before an effect's call, a lease claimed or renewed less than a third of it ago is fresh."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import datetime, timedelta

from models.db import utcnow
from worker.engine.fencing import fresh_lease, margin_for


@dataclass
class Holder:
    lease_expires_at: datetime | None
    lease_seconds: float = 60.0
    run_id: str = "r1"
    epoch: int = 1


def test_a_lease_with_two_thirds_left_is_fresh_and_counted_from_its_end() -> None:
    ends = utcnow() + timedelta(seconds=50)
    lease = fresh_lease(Holder(ends))
    assert lease is not None
    assert lease.expires_at == ends
    assert 49 < lease.left() <= 50
    assert lease.margin == margin_for(60.0)


def test_a_lease_a_third_spent_or_unknown_is_renewed() -> None:
    assert fresh_lease(Holder(utcnow() + timedelta(seconds=39))) is None
    assert fresh_lease(Holder(utcnow() - timedelta(seconds=1))) is None
    assert fresh_lease(Holder(None)) is None


def test_a_lease_never_counts_as_longer_than_a_lease() -> None:
    # (a wall clock set back since the claim wrote the lease's end)
    lease = fresh_lease(Holder(utcnow() + timedelta(seconds=600)))
    assert lease is not None
    assert lease.left() <= 60.0 and lease.deadline <= time.monotonic() + 60.0
