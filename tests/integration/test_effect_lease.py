"""An effect's intent renews the step's lease only when a third of the lease has passed.

Before ``fn`` is called the lease must be fresh: claimed or renewed less than a third of it
ago, the lease keeper's own rule. Most effects run a moment after their step's claim, whose
lease is as fresh as a renewal would make it: their intent is written alone (one write of the
run's row fewer per effect). An effect later in its step renews the lease with its intent, in
the same statement, as before.
"""

from __future__ import annotations

import threading
import time
from datetime import datetime, timedelta
from typing import Any

from models.db import transaction
from models.tables import Run
from tests.services import each_statement
from worker import enqueue_run, get_run
from worker.flows.flow import Flow
from worker.testing import TaskRecorder

INTENT = "INSERT INTO effects"
RENEWAL = "UPDATE runs SET lease_expires_at"


def _lease_of(run_id: str) -> datetime:
    with transaction(readonly=True) as session:
        found = session.get(Run, run_id)
        assert found is not None and found.lease_expires_at is not None
        return found.lease_expires_at


def _run_effect_after(
    db: str, tasks: TaskRecorder, name: str, *, lease: float, wait: float
) -> tuple[dict[str, Any], list[str]]:
    """Run a one-step flow with a lease of ``lease`` seconds whose step waits ``wait`` seconds,
    then calls one effect. What the step saw of its lease, and what was written of the intent
    and the renewal, in order."""
    flow = Flow(name)
    seen: dict[str, Any] = {}

    @flow.step(lease_seconds=lease)
    def act(ctx: Any) -> None:
        seen["claimed"] = _lease_of(ctx.run_id)
        time.sleep(wait)

        def call(*, idempotency_key: str, fencing_token: int) -> dict[str, int]:
            # The intent is committed when ``fn`` is called: the row says what it left.
            seen["calling"] = _lease_of(ctx.run_id)
            seen["known"] = ctx.lease_expires_at
            return {"epoch": fencing_token}

        ctx.effect("charge", call)

    written: list[str] = []

    def sent(sql: str, _params: Any) -> None:
        # The intent, and the lease renewal: inside it (PostgreSQL), or after it (SQLite, where
        # the writes of a transaction go one by one). The step's own, not the lease keeper's.
        if threading.current_thread() is stepping:
            written.extend(what for what in (INTENT, RENEWAL) if what in sql)

    stepping = threading.current_thread()
    run_id = enqueue_run(name, {})
    with each_statement(db, sent):
        tasks.drain()
    assert get_run(run_id).state == "succeeded"
    return seen, written


def test_an_effect_soon_after_its_claim_keeps_the_lease_the_claim_gave(
    db: str, defining: TaskRecorder
) -> None:
    # Given a step with a 60 s lease that calls an effect as soon as it runs
    seen, written = _run_effect_after(db, defining, "lease_fresh_effect", lease=60, wait=0)
    # Then its intent was written alone, without renewing the run's lease: when ``fn`` is
    # called the lease is the one the claim gave, and the step knows it
    assert written == [INTENT]
    assert seen["calling"] == seen["claimed"] == seen["known"]


def test_an_effect_after_a_third_of_the_lease_renews_it_with_the_intent(
    db: str, defining: TaskRecorder
) -> None:
    # Given a step with a 1.5 s lease that waits 0.6 s (more than a third) before its effect
    seen, written = _run_effect_after(db, defining, "lease_spent_effect", lease=1.5, wait=0.6)
    # Then the renewal went with the intent (in its statement, on PostgreSQL), and ``fn`` was
    # called under a lease that ends a full lease after the renewal, later than the claim's
    assert written == [INTENT, RENEWAL]
    assert seen["calling"] >= seen["claimed"] + timedelta(seconds=0.5)
    # (the lease keeper may renew it too, before or after: never to an earlier end)
    assert seen["known"] >= seen["claimed"] + timedelta(seconds=0.5)
