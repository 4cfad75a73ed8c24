"""Keeping a worker's lease alive while its step runs longer than the lease.

One daemon thread per process renews the leases of the steps this process is executing,
each once a third of it has passed (``FRESH_SHARE`` of it left), fenced on the epoch: a
renewal never extends a lease that another owner has taken. Without it, a step longer than its
lease would be reclaimed by the reaper and executed twice (safely, thanks to fencing, but for
nothing).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta

from models import claims
from models.db import transaction, utcnow
from models.db_errors import describe, is_transient

log = logging.getLogger(__name__)

# How often the renewing thread looks at the leases it keeps.
TICK_SECONDS = 0.5
# A lease with this share of its length left is renewed (here) or fresh enough for an effect's
# call without a renewal (``worker.engine.fencing.fresh_lease``): one rule for both.
FRESH_SHARE = 2 / 3


@dataclass
class _Held:
    run_id: str
    epoch: int
    seconds: float
    expires_at: datetime

    @property
    def renew_at(self) -> datetime:
        return self.expires_at - timedelta(seconds=self.seconds * FRESH_SHARE)


class LeaseKeeper:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[tuple[str, int], _Held] = {}
        self._thread: threading.Thread | None = None

    @contextmanager
    def holding(
        self, run_id: str, epoch: int, seconds: float, expires_at: datetime | None
    ) -> Iterator[None]:
        """Keep the lease of ``run_id`` at ``epoch`` alive until the block ends."""
        key = (run_id, epoch)
        held = _Held(run_id, epoch, seconds, expires_at or utcnow() + timedelta(seconds=seconds))
        with self._lock:
            self._held[key] = held
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="interlude-lease", daemon=True
                )
                self._thread.start()
        try:
            yield
        finally:
            with self._lock:
                self._held.pop(key, None)

    def _run(self) -> None:
        while True:
            time.sleep(TICK_SECONDS)
            now = utcnow()
            with self._lock:
                due = [h for h in self._held.values() if h.renew_at <= now]
            for held in due:
                self._renew(held, now)

    def _renew(self, held: _Held, now: datetime) -> None:
        expires_at = now + timedelta(seconds=held.seconds)
        try:
            with transaction(autocommit=True) as session:  # one compare-and-set
                renewed = claims.renew_lease(
                    session, held.run_id, epoch=held.epoch, expires_at=expires_at
                )
        except Exception as exc:
            if is_transient(exc):  # the database restarting: one line, tried again next tick
                reason = describe(exc)
                log.warning(
                    "lease renewal failed: %s",
                    reason,
                    extra={"action": "lease", "run_id": held.run_id},
                )
                return
            log.exception("lease renewal failed", extra={"action": "lease", "run_id": held.run_id})
            return
        if renewed:
            held.expires_at = expires_at
        else:
            # Another owner took the run; the step will learn it when it tries to commit.
            with self._lock:
                self._held.pop((held.run_id, held.epoch), None)
            log.warning("lease lost", extra={"action": "lease_lost", "run_id": held.run_id})

    def reset_after_fork(self) -> None:
        self._lock = threading.Lock()
        self._held = {}
        self._thread = None


keeper = LeaseKeeper()
os.register_at_fork(after_in_child=keeper.reset_after_fork)
