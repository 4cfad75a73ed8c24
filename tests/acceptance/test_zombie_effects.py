"""A worker frozen inside an effect's function wakes after its run moved on (a zombie).

The ledger cannot unsend the zombie's call; what it promises is that a new owner settles the
old intent only after the old lease expired plus a grace, calls again with a newer fencing
token, and never records a second outcome. A target that deduplicates on the idempotency key
then applies the effect once. The process is frozen with SIGSTOP, as a long GC pause, a frozen
VM or a stopped container would freeze it; the reaper is called here, when the lease expired.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select

from models.contracts import ResumeContract
from models.db import transaction, utcnow
from models.tables import Interrupt, Run
from tests.flows.effects import applied, landed, outside, receipt_of, ship_calls
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_interrupts, submit_resume
from worker.engine.reaper import reap
from worker.runs import list_effects

GRACE = 2.0
ENV = {"INTERLUDE_EFFECT_GRACE": str(GRACE), "INTERLUDE_EFFECT_MARGIN": "0.5"}


def _lease_expired(run_id: str) -> bool:
    with transaction(readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return bool(
            run.state == "running"
            and run.lease_expires_at is not None
            and run.lease_expires_at < utcnow()
        )


def _take_over(run_id: str) -> None:
    """Once the frozen owner's lease has expired, let the reaper hand the run on."""
    wait_for(lambda: _lease_expired(run_id), timeout=30)
    assert reap() >= 1


class _Both:
    """The workers of a test, read as one log."""

    def __init__(self, *workers: WorkerProcess) -> None:
        self.workers = workers

    def output(self) -> str:
        return "".join(worker.output() for worker in self.workers)


def _two_workers(start: Callable[..., WorkerProcess]) -> _Both:
    """Two one-slot workers: whichever takes the first call, the other takes the run over."""
    first = start("-c", "1", **ENV)
    second = start("-c", "1", **ENV)
    return _Both(first, second)


def _finished(run_id: str) -> bool:
    return get_run(run_id).state in {"succeeded", "failed", "cancelled", "expired"}


def _freeze(run_id: str) -> int:
    """SIGSTOP the pool process that is inside the run's first call, before it writes."""
    pid = int(wait_for(lambda: outside().get(f"stalled:{run_id}"), timeout=30))
    os.kill(pid, signal.SIGSTOP)
    return pid


def _thaw(run_id: str, pid: int) -> None:
    outside().set(f"release:{run_id}", 1)
    os.kill(pid, signal.SIGCONT)


def _assert_applied_once_by_the_new_owner(run_id: str, worker: _Both) -> None:
    # The zombie's call reached the target too, and the target absorbed it...
    wait_for(lambda: landed(run_id) == 2, timeout=30)
    assert applied(run_id) == 1
    # ...the stale call carried the old epoch, the new owner's the new one...
    assert ship_calls(run_id) == [1, 2]
    # ...the zombie's outcome was refused, and the ledger holds one entry: the new owner's
    wait_for(lambda: f"run {run_id}: lease epoch 1 was superseded" in worker.output(), timeout=30)
    [effect] = list_effects(run_id)
    assert (effect.status, effect.epoch) == ("applied", 2)
    assert effect.receipt == receipt_of(effect.idempotency_key)
    assert effect.receipt["epoch"] == 2
    assert get_run(run_id).output["receipt"] == effect.receipt


def test_zombie_call_lands_once_at_an_idempotent_target_and_never_in_the_ledger(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = _two_workers(start_worker)
    # Given a worker frozen inside the effect's function, before its write, past its lease
    run_id = enqueue_run("zombie_effect", {})
    pid = _freeze(run_id)
    try:
        # When the run is reclaimed, and the new owner reconciles and calls again
        _take_over(run_id)
        wait_for(lambda: _finished(run_id), timeout=60)
        assert get_run(run_id).state == "succeeded", get_run(run_id).error
        # (it settled the stale intent only after the old lease expired plus the grace)
        assert "waiting" in worker.output() and "stale owner of epoch 1" in worker.output()
    finally:
        # Then the zombie wakes and finishes its call
        _thaw(run_id, pid)
    _assert_applied_once_by_the_new_owner(run_id, worker)


def _repair_created(run_id: str) -> datetime:
    with transaction(readonly=True) as session:
        created: datetime = session.execute(
            select(Interrupt.created_at).where(Interrupt.run_id == run_id)
        ).scalar_one()
    return created


def _answer(interrupt: Any, credential: str, finding: dict[str, Any]) -> None:
    result = submit_resume(
        ResumeContract.for_interrupt(
            interrupt, actor="night-operator", input=finding, expires_in=timedelta(hours=1)
        ),
        credential,
    )
    assert result.accepted, result


def test_repair_of_a_zombie_intent_waits_out_the_grace_and_names_the_stale_epoch(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    credential = add_actor("night-operator", ["operator"])
    worker = _two_workers(start_worker)
    # Given a frozen worker inside an effect that no reconciler can look up
    run_id = enqueue_run("zombie_effect", {"blind": True})
    pid = _freeze(run_id)
    try:
        # When the run is reclaimed
        _take_over(run_id)
        wait_for(lambda: get_run(run_id).state == "waiting", timeout=60)
        # Then the repair names the stale epoch and when its lease ended, and was raised
        # only once that lease had expired plus the grace
        [repair] = list_interrupts(status="pending", kind="repair")
        assert repair.evidence["stale_epoch"] == 1
        ended = datetime.fromisoformat(repair.evidence["stale_lease_ended_at"])
        assert _repair_created(run_id) >= ended + timedelta(seconds=GRACE)
        # When the operator finds nothing at the target (the zombie is still frozen) and
        # says so, the new owner calls again
        assert receipt_of(repair.evidence["idempotency_key"]) is None
        _answer(repair, credential, {"outcome": "not_applied"})
        wait_for(lambda: _finished(run_id), timeout=60)
        assert get_run(run_id).state == "succeeded", get_run(run_id).error
    finally:
        _thaw(run_id, pid)
    # Then the effect still reached the target once, and the ledger holds one entry
    wait_for(lambda: landed(run_id) == 2, timeout=30)
    assert applied(run_id) == 1
    assert ship_calls(run_id) == [1, 3]
    wait_for(lambda: f"run {run_id}: lease epoch 1 was superseded" in worker.output(), timeout=30)
    [effect] = list_effects(run_id)
    assert effect.status == "applied"
    assert effect.receipt == receipt_of(effect.idempotency_key)


def _hold_database(run_id: str, seconds: float) -> None:
    """Hold the run's row (PostgreSQL) or the write lock (SQLite) for ``seconds``."""
    with transaction() as session:
        session.execute(select(Run.id).where(Run.id == run_id).with_for_update())
        # SQLite takes its write lock with the first statement of a write transaction.
        outside().set(f"go:{run_id}", 1)
        time.sleep(seconds)


def test_no_call_when_the_lease_has_no_margin_left(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    worker = _two_workers(start_worker)
    # Given a step about to call an effect, whose lease renewal is held up by the database
    # for longer than its two-second lease minus the margin
    run_id = enqueue_run("zombie_effect", {"hold": True})
    wait_for(lambda: outside().get(f"holding:{run_id}"), timeout=30)
    _hold_database(run_id, 2.5)
    # Then the worker does not call the function, and says why...
    wait_for(lambda: "not called: the lease had" in worker.output(), timeout=30)
    assert ship_calls(run_id) == []
    [effect] = list_effects(run_id)
    assert effect.status == "failed" and "margin" in (effect.error or "")
    # ...and when its lease expires, the next owner calls it, once
    _take_over(run_id)
    wait_for(lambda: _finished(run_id), timeout=60)
    assert get_run(run_id).state == "succeeded", get_run(run_id).error
    assert ship_calls(run_id) == [2]
    assert applied(run_id) == 1
    [effect] = list_effects(run_id)
    assert (effect.status, effect.epoch) == ("applied", 2)
