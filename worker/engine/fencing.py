"""Effects against zombie workers: a lease margin before the call, a grace before settling.

No ledger can stop a worker frozen *inside* an effect's function from finishing its call after
the run moved on. Two habits narrow the window, and the function's target closes it (it gets
the idempotency key and the fencing epoch):

* a worker calls ``fn`` only while its lease is fresh (claimed or renewed less than a third
  of it ago, else renewed with the intent) and has more than a margin left, so a call starts
  well before anyone else may own the run;
* a later owner that finds an older owner's intent unsettled waits until that owner's lease
  expired plus a grace before it asks the reconciler or an operator, so a call that was still
  in flight has had time to land where the reconciler will see it.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Protocol

from models import claims, fencing
from models.db import transaction, utcnow
from models.effects import LedgerEntry
from models.errors import FencedError, LeaseMarginError
from models.scope import Scope
from models.settings import get_settings
from models.statements import Write
from worker.engine.lease import FRESH_SHARE

log = logging.getLogger(__name__)


class LeaseHolder(Protocol):
    """What fencing needs of the step that calls an effect (an ``EffectScope``): its run, its
    lease's epoch and length. Named here, so that the ledger imports fencing and not back."""

    @property
    def run_id(self) -> str: ...

    @property
    def epoch(self) -> int: ...

    @property
    def lease_seconds(self) -> float: ...

    # When the lease ends, as this execution last wrote it (its claim, or a renewal with an
    # intent); None when unknown. The lease keeper's renewals are not counted: they only
    # make the lease longer than this says.
    lease_expires_at: datetime | None


@dataclass(frozen=True)
class Lease:
    """A lease as this process's monotonic clock sees it, and when it ends as written."""

    deadline: float
    margin: float
    expires_at: datetime

    def left(self) -> float:
        return self.deadline - time.monotonic()


def margin_for(lease_seconds: float) -> float:
    """The configured margin, at most half the step's lease (else no effect could ever run)."""
    return min(get_settings().effect_margin, lease_seconds / 2)


def fresh_lease(ctx: LeaseHolder) -> Lease | None:
    """The lease as the claim or the last renewal left it, if at least ``FRESH_SHARE`` of it
    is left; None when it must be renewed before a call (or is not known).

    The lease keeper's own rule (``worker.engine.lease``): renewing a lease the claim gave a
    moment ago (most effects run soon after their step's claim) was one more write of the
    run's row per effect, 8 % of the server's instructions in a W1 run."""
    if ctx.lease_expires_at is None:
        return None
    # (Never counted as longer than a lease, whatever the wall clock did since it was written.)
    left = min((ctx.lease_expires_at - utcnow()).total_seconds(), ctx.lease_seconds)
    if left < ctx.lease_seconds * FRESH_SHARE:
        return None
    return Lease(time.monotonic() + left, margin_for(ctx.lease_seconds), ctx.lease_expires_at)


def renew_for_call(session: Scope, ctx: LeaseHolder) -> Lease:
    """Renew the lease in the caller's (intent) transaction; FencedError if it is gone.

    The deadline is counted from before the renewal, so time spent waiting for the database
    is never counted as lease.
    """
    started, now = time.monotonic(), utcnow()
    expires_at = now + timedelta(seconds=ctx.lease_seconds)
    if not claims.renew_lease(session, ctx.run_id, epoch=ctx.epoch, expires_at=expires_at):
        raise FencedError(run_id=ctx.run_id, epoch=ctx.epoch)
    return Lease(started + ctx.lease_seconds, margin_for(ctx.lease_seconds), expires_at)


def renewal_for_call(ctx: LeaseHolder) -> tuple[Lease, Write]:
    """The renewal of ``renew_for_call`` as a write to go with the intent (one round trip);
    the intent is written only while the lease is the caller's, so it stands for the check."""
    started, now = time.monotonic(), utcnow()
    expires_at = now + timedelta(seconds=ctx.lease_seconds)
    renewal = claims.lease_renewal(ctx.run_id, epoch=ctx.epoch, expires_at=expires_at)
    return Lease(started + ctx.lease_seconds, margin_for(ctx.lease_seconds), expires_at), renewal


def check_margin(ctx: LeaseHolder, name: str, lease: Lease) -> None:
    """Refuse to call ``fn`` unless the lease has more than the margin left."""
    left = lease.left()
    if left <= lease.margin:
        raise LeaseMarginError(run_id=ctx.run_id, name=name, left=left, margin=lease.margin)


def await_stale_owner(ctx: LeaseHolder, entry: LedgerEntry) -> datetime | None:
    """Wait until the lease of the owner that left ``entry`` unsettled expired plus the grace.

    Returns when that lease ended (None when the intent is this execution's own epoch or the
    trail cannot tell). The step's lease is kept alive meanwhile by the lease keeper.
    """
    if entry.epoch >= ctx.epoch:
        return None
    with transaction(readonly=True) as session:
        ended, released = fencing.stale_lease(session, ctx.run_id, entry.epoch)
    if released:
        return ended  # that owner gave the run back once its calls had returned: none in flight
    grace = get_settings().effect_grace
    settle_at = (ended or utcnow()) + timedelta(seconds=grace)
    wait = min((settle_at - utcnow()).total_seconds(), grace)
    if wait > 0:
        log.info(
            "waiting %.1fs for the stale owner of epoch %d before settling %s",
            wait,
            entry.epoch,
            entry.name,
            extra={"action": "await_stale_owner", "run_id": ctx.run_id},
        )
        time.sleep(wait)
    return ended
