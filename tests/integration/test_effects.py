"""The effect ledger, steps executed in-process (``drain``): once, failed, reconciled, repaired.

A worker killed or frozen in the middle of an effect: tests/acceptance/test_effect_fencing.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select

from models import claims as claim_store
from models import runs as run_store
from models.db import transaction, utcnow
from models.tables import Effect, Event
from tests.flows.effects import applied, calls
from tests.services import wait_for
from worker import ResumeContract, add_actor, enqueue_run, get_run, list_interrupts, submit_resume
from worker.engine.reaper import reap
from worker.runs import list_effects
from worker.testing import TaskRecorder

FINISHED = {"succeeded", "failed", "cancelled", "expired"}


def _state(run_id: str) -> str:
    return get_run(run_id).state


def _finished(run_id: str) -> bool:
    return _state(run_id) in FINISHED


def _counter(run_id: str, trigger: str) -> int:
    with transaction(readonly=True) as session:
        details = session.execute(
            select(Event.detail)
            .where(Event.run_id == run_id, Event.trigger == trigger)
            .order_by(Event.id)
        ).scalars()
        return sum(int((d or {}).get("count", 1)) for d in details)


def _resolve(interrupt: Any, credential: str, actor: str, decision: str, input: Any) -> Any:
    contract = ResumeContract.for_interrupt(
        interrupt, actor=actor, decision=decision, input=input, expires_in=timedelta(hours=1)
    )
    return submit_resume(contract, credential)


def test_effect_applied_once_across_re_execution_returns_its_receipt(tasks: TaskRecorder) -> None:
    # Given a step that fails after its effect on its first execution (then is retried)
    run_id = enqueue_run("effect_ledger", {"amount": 7, "fail_after_effect": True})
    # When the worker runs it to the end
    tasks.drain()
    # Then the step ran twice, the effect once, and the second execution got the stored receipt
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert calls(run_id) == 1
    assert applied(run_id) == 1
    [effect] = list_effects(run_id)
    assert effect.status == "applied"
    assert effect.idempotency_key == f"{run_id}:0:charge:charge"
    assert effect.receipt == {"charged": 7, "key": effect.idempotency_key, "epoch": 1}
    assert run.output["receipt"] == effect.receipt
    # And the operator can read the repeated work from the audit trail
    assert _counter(run_id, "step_reexecuted") == 1
    assert _counter(run_id, "effect_skipped") == 1


def test_failed_effect_is_recorded_with_its_error(tasks: TaskRecorder) -> None:
    run_id = enqueue_run("effect_refused", {})
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "failed"
    assert run.error == "ValueError: card declined"
    [effect] = list_effects(run_id)
    assert (effect.status, effect.error, effect.receipt) == (
        "failed",
        "ValueError: card declined",
        None,
    )
    assert calls(run_id) == 1


def test_effect_before_an_interrupt_is_not_repeated_when_the_step_resumes(
    tasks: TaskRecorder,
) -> None:
    credential = add_actor("approver-1", ["approver"])
    run_id = enqueue_run("effect_then_interrupt", {})
    tasks.drain()
    assert _state(run_id) == "waiting"
    # The run waits with its effect recorded (never suspended with an effect unrecorded)
    assert [e.status for e in list_effects(run_id)] == ["applied"]
    [interrupt] = list_interrupts(run_id=run_id, status="pending")
    assert _resolve(interrupt, credential, "approver-1", "approved", {"go": True}).accepted
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output["decision"] == "approved"
    assert (calls(run_id), applied(run_id)) == (1, 1)
    assert _counter(run_id, "effect_skipped") == 1


def _crashed_mid_effect(input: dict[str, Any]) -> str:
    """A run whose first worker recorded the intent of ``charge`` and died (lease expired)."""
    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name="effect_ledger",
            flow_version=1,
            input=input,
            first_step="charge",
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        run_id = run.id
    now = utcnow()
    with transaction() as session:
        claimed = claim_store.claim(session, run_id, owner="dead-worker", lease_seconds=0.01)
        assert claimed is not None
        session.add(
            Effect(
                run_id=run_id,
                step="charge",
                name="charge",
                idempotency_key=f"{run_id}:0:charge:charge",
                epoch=claimed.lease_epoch,
                request_hash="sha256:unknown",
                status="intent",
                created_at=now,
                updated_at=now,
            )
        )
    # The reaper finds the dead worker's lease expired and requeues the run.
    wait_for(lambda: reap() >= 1, timeout=10)
    return run_id


def test_reconciled_receipt_marks_the_intent_applied_without_calling_again(
    tasks: TaskRecorder,
) -> None:
    run_id = _crashed_mid_effect({"verdict": "receipt"})
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    key = f"{run_id}:0:charge:charge"
    assert run.output["receipt"] == {"reconciled": key}
    assert calls(run_id) == 0
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt, effect.epoch) == ("applied", {"reconciled": key}, 2)
    assert _counter(run_id, "effect_reconciled") == 1
    assert _counter(run_id, "step_reexecuted") == 1


def test_reconciled_not_applied_calls_the_effect_again_once(tasks: TaskRecorder) -> None:
    run_id = _crashed_mid_effect({"verdict": "not_applied"})
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert (calls(run_id), applied(run_id)) == (1, 1)
    [effect] = list_effects(run_id)
    assert effect.status == "applied"
    assert effect.receipt["epoch"] == 2
    assert _counter(run_id, "effect_reconciled") == 1


@pytest.mark.parametrize(
    ("finding", "expected_calls"),
    [
        ({"outcome": "applied", "receipt": {"found": "in the bank's statement"}}, 0),
        ({"outcome": "not_applied", "note": "nothing in the statement"}, 1),
    ],
)
def test_unknown_outcome_raises_a_repair_that_an_operator_settles(
    tasks: TaskRecorder, finding: dict[str, Any], expected_calls: int
) -> None:
    operator = add_actor("operator-1", ["operator"])
    bystander = add_actor("bystander-1", ["approver"])
    # Given a run whose effect outcome is unknown and cannot be reconciled
    run_id = _crashed_mid_effect({"verdict": "unknown"})
    # Then the run stops with a repair interrupt naming the effect
    tasks.drain()
    assert _state(run_id) == "waiting"
    [repair] = list_interrupts(run_id=run_id, status="pending")
    key = f"{run_id}:0:charge:charge"
    assert (repair.kind, repair.name, repair.roles) == ("repair", "repair:charge", ["operator"])
    with transaction(readonly=True) as session:
        [requeue] = session.execute(
            select(Event.detail).where(Event.run_id == run_id, Event.trigger == "requeue")
        ).scalars()
    assert repair.evidence == {
        "effect": "charge",
        "idempotency_key": key,
        "intent_epoch": 1,
        # the dead owner's epoch, and when the reaper saw its lease expired
        "stale_epoch": 1,
        "stale_lease_ended_at": requeue["lease_expires_at"],
    }
    assert "charge" in repair.reason
    assert _counter(run_id, "repair_raised") == 1
    assert calls(run_id) == 0
    # A responder without the operator role is refused
    refused = _resolve(repair, bystander, "bystander-1", "approved", finding)
    assert refused.outcome == "denied"
    # When an operator records what they found
    assert _resolve(repair, operator, "operator-1", "approved", finding).accepted
    # Then the run finishes, calling the effect again only if it was not applied
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert calls(run_id) == expected_calls
    [effect] = list_effects(run_id)
    assert effect.status == "applied"
    if expected_calls == 0:
        assert effect.receipt == finding["receipt"]
    assert _counter(run_id, "effect_reconciled") == 1 - expected_calls
