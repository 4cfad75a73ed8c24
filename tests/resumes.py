"""Helpers for the interrupt and gateway tests: contracts, waiting for runs, snapshots."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from sqlalchemy import select

from models.contracts import InterruptView, contract_payload
from models.db import transaction
from models.tables import Checkpoint, Event, Interrupt, Run
from tests.services import wait_for
from worker import add_actor, enqueue_run, get_run
from worker.testing import drain

FINISHED = {"succeeded", "failed", "cancelled", "expired"}


def contract_for(
    interrupt: InterruptView,
    actor_id: str,
    *,
    decision: str = "approved",
    input: dict[str, Any] | None = None,
    key: str | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """A ``resume.v1`` contract for ``interrupt`` (``ResumeContract.for_interrupt`` as JSON),
    with fields replaced by ``overrides``: tests submit malformed ones too."""
    contract = contract_payload(
        interrupt,
        actor=actor_id,
        decision=decision,
        input=input if input is not None else {},
        idempotency_key=key,
        expires_in=timedelta(minutes=10),
    )
    contract.update(overrides)
    return contract


def pending(run_id: str, name: str | None = None) -> InterruptView | None:
    """The run's pending interrupt (named ``name``) once the run is waiting, else None."""
    run = get_run(run_id)
    if run.state != "waiting":
        return None
    for interrupt in run.pending_interrupts:
        if name is None or interrupt.name == name:
            return interrupt
    return None


def wait_pending(run_id: str, name: str | None = None, timeout: float = 30) -> InterruptView:
    found: InterruptView = wait_for(lambda: pending(run_id, name), timeout=timeout)
    return found


def wait_finished(run_id: str, timeout: float = 30) -> str:
    state: str = wait_for(
        lambda: s if (s := get_run(run_id).state) in FINISHED else None, timeout=timeout
    )
    return state


def drain_pending(run_id: str, name: str | None = None) -> InterruptView:
    """Execute the recorded tasks, then the run's pending interrupt (which must exist)."""
    drain()
    found = pending(run_id, name)
    assert found is not None, f"run {run_id} is {get_run(run_id).state}, not waiting on {name}"
    return found


@dataclass
class Waiting:
    """A run waiting on an interrupt, and the credential of one who may answer it."""

    run_id: str
    interrupt: InterruptView
    credential: str


def approval_waiting_on_alice(*others: str) -> Waiting:
    """An approval run (``tests.flows``) waiting on its interrupt, which alice (approver) may
    answer, as may ``others``, approvers too; for tests with the ``db`` and ``tasks`` fixtures."""
    credential = add_actor("alice", ["approver"])
    for other in others:
        add_actor(other, ["approver"])
    run_id = enqueue_run("approval", {"env": "prod", "diff": "d-1"})
    return Waiting(run_id, drain_pending(run_id), credential)


def drain_finished(run_id: str) -> str:
    """Execute the recorded tasks, then the state the run finished in (it must have)."""
    drain()
    state = get_run(run_id).state
    assert state in FINISHED, f"run {run_id} is {state}, not finished"
    return state


def snapshot(run_id: str) -> dict[str, Any]:
    """Every stored fact about a run that a refused resume must leave alone."""
    with transaction(readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        checkpoints = session.execute(
            select(Checkpoint).where(Checkpoint.run_id == run_id).order_by(Checkpoint.seq)
        ).scalars()
        interrupts = session.execute(
            select(Interrupt).where(Interrupt.run_id == run_id).order_by(Interrupt.id)
        ).scalars()
        events = session.execute(
            select(Event.id).where(Event.run_id == run_id).order_by(Event.id)
        ).scalars()
        return {
            "run": _columns(run),
            "checkpoints": [_columns(c) for c in checkpoints],
            "interrupts": [_columns(i) for i in interrupts],
            "events": list(events),
        }


def _columns(row: Any) -> dict[str, Any]:
    return {c.key: getattr(row, c.key) for c in row.__table__.columns}


def triggers(run_id: str) -> list[str]:
    """The run's events, oldest first, by trigger."""
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id)
            ).scalars()
        )
