"""The effect ledger with a real worker: once, failed, reconciled, repaired and fenced."""

from __future__ import annotations

import os
import signal
import uuid
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from models import runs as run_store
from models.db import transaction, utcnow
from models.settings import get_settings
from models.tables import Checkpoint, Effect, Event, Run
from tests.flows.effects import applied, calls, outside
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_interrupts, submit_resume
from worker.reaper import reap
from worker.runs import list_effects

FINISHED = {"succeeded", "failed", "cancelled", "expired"}


def _state(run_id: str) -> str:
    return get_run(run_id).state


def _finished(run_id: str) -> bool:
    return _state(run_id) in FINISHED


def _triggers(run_id: str) -> list[str]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id)
            ).scalars()
        )


def _counter(run_id: str, trigger: str) -> int:
    with transaction(readonly=True) as session:
        details = session.execute(
            select(Event.detail)
            .where(Event.run_id == run_id, Event.trigger == trigger)
            .order_by(Event.id)
        ).scalars()
        return sum(int((d or {}).get("count", 1)) for d in details)


def _resolve(interrupt: Any, credential: str, actor: str, decision: str, input: Any) -> Any:
    return submit_resume(
        {
            "schema_version": "resume.v1",
            "run_id": interrupt.run_id,
            "checkpoint_id": interrupt.checkpoint_id,
            "interrupt_id": interrupt.id,
            "actor": {"type": "human", "id": actor},
            "decision": decision,
            "input": input,
            "scope": interrupt.scope,
            "evidence_hash": interrupt.evidence_hash,
            "idempotency_key": uuid.uuid4().hex,
            "expires_at": (utcnow() + timedelta(hours=1)).isoformat(),
        },
        credential,
    )


def test_effect_applied_once_across_re_execution_returns_its_receipt(
    db: str, shared_worker: WorkerProcess
) -> None:
    # Given a step that fails after its effect on its first execution (then is retried)
    run_id = enqueue_run("effect_ledger", {"amount": 7, "fail_after_effect": True})
    # When the worker runs it to the end
    wait_for(lambda: _finished(run_id), timeout=30)
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


def test_failed_effect_is_recorded_with_its_error(db: str, shared_worker: WorkerProcess) -> None:
    run_id = enqueue_run("effect_refused", {})
    wait_for(lambda: _finished(run_id), timeout=30)
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
    db: str, shared_worker: WorkerProcess
) -> None:
    credential = add_actor("approver-1", ["approver"])
    run_id = enqueue_run("effect_then_interrupt", {})
    wait_for(lambda: _state(run_id) == "waiting", timeout=30)
    # The run waits with its effect recorded (never suspended with an effect unrecorded)
    assert [e.status for e in list_effects(run_id)] == ["applied"]
    [interrupt] = list_interrupts(run_id=run_id, status="pending")
    assert _resolve(interrupt, credential, "approver-1", "approved", {"go": True}).accepted
    wait_for(lambda: _finished(run_id), timeout=30)
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
        claimed = run_store.claim(session, run_id, owner="dead-worker", lease_seconds=0.01)
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
    db: str, shared_worker: WorkerProcess
) -> None:
    run_id = _crashed_mid_effect({"verdict": "receipt"})
    wait_for(lambda: _finished(run_id), timeout=30)
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    key = f"{run_id}:0:charge:charge"
    assert run.output["receipt"] == {"reconciled": key}
    assert calls(run_id) == 0
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt, effect.epoch) == ("applied", {"reconciled": key}, 2)
    assert _counter(run_id, "effect_reconciled") == 1
    assert _counter(run_id, "step_reexecuted") == 1


def test_reconciled_not_applied_calls_the_effect_again_once(
    db: str, shared_worker: WorkerProcess
) -> None:
    run_id = _crashed_mid_effect({"verdict": "not_applied"})
    wait_for(lambda: _finished(run_id), timeout=30)
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
    db: str, shared_worker: WorkerProcess, finding: dict[str, Any], expected_calls: int
) -> None:
    operator = add_actor("operator-1", ["operator"])
    bystander = add_actor("bystander-1", ["approver"])
    # Given a run whose effect outcome is unknown and cannot be reconciled
    run_id = _crashed_mid_effect({"verdict": "unknown"})
    # Then the run stops with a repair interrupt naming the effect
    wait_for(lambda: _state(run_id) == "waiting", timeout=30)
    [repair] = list_interrupts(run_id=run_id, status="pending")
    key = f"{run_id}:0:charge:charge"
    assert (repair.kind, repair.name, repair.roles) == ("repair", "repair:charge", ["operator"])
    assert repair.evidence == {"effect": "charge", "idempotency_key": key, "intent_epoch": 1}
    assert "charge" in repair.reason
    assert _counter(run_id, "repair_raised") == 1
    assert calls(run_id) == 0
    # A responder without the operator role is refused
    refused = _resolve(repair, bystander, "bystander-1", "approved", finding)
    assert refused.outcome == "denied"
    # When an operator records what they found
    assert _resolve(repair, operator, "operator-1", "approved", finding).accepted
    # Then the run finishes, calling the effect again only if it was not applied
    wait_for(lambda: _finished(run_id), timeout=30)
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert calls(run_id) == expected_calls
    [effect] = list_effects(run_id)
    assert effect.status == "applied"
    if expected_calls == 0:
        assert effect.receipt == finding["receipt"]
    assert _counter(run_id, "effect_reconciled") == 1 - expected_calls


def test_an_operator_finding_answers_only_for_the_intent_it_was_given_on(
    db: str, shared_worker: WorkerProcess
) -> None:
    operator = add_actor("operator-2", ["operator"])
    # Given a repair settled as "not applied", after which the effect is called again and
    # its worker dies inside the call (outcome unknown once more)
    run_id = _crashed_mid_effect({"verdict": "unknown", "crash_in_fn": True})
    wait_for(lambda: _state(run_id) == "waiting", timeout=30)
    [first] = list_interrupts(run_id=run_id, status="pending")
    assert first.evidence["intent_epoch"] == 1
    assert _resolve(first, operator, "operator-2", "approved", {"outcome": "not_applied"}).accepted
    wait_for(lambda: outside().exists(f"crashed:{run_id}:in_fn"), timeout=30)
    # When the dead worker's lease is reaped
    lease = get_settings().lease_seconds
    wait_for(lambda: reap(now=utcnow() + timedelta(seconds=lease + 1)) >= 1, timeout=30)
    # Then the old finding is not reused: a new repair asks about the new intent
    wait_for(lambda: list_interrupts(run_id=run_id, status="pending"), timeout=30)
    [second] = list_interrupts(run_id=run_id, status="pending")
    assert (second.name, second.evidence["intent_epoch"]) == ("repair:charge", 3)
    assert calls(run_id) == 0
    assert _resolve(second, operator, "operator-2", "approved", {"outcome": "not_applied"}).accepted
    wait_for(lambda: _finished(run_id), timeout=30)
    assert _state(run_id) == "succeeded"
    assert (calls(run_id), applied(run_id)) == (1, 1)
    assert _counter(run_id, "repair_raised") == 2


def _epochs_written(run_id: str) -> tuple[set[int], list[str]]:
    with transaction(readonly=True) as session:
        epochs = set(
            session.execute(
                select(Checkpoint.epoch).where(Checkpoint.run_id == run_id, Checkpoint.seq > 0)
            ).scalars()
        )
        actors = list(
            session.execute(
                select(Event.actor).where(
                    Event.run_id == run_id, Event.trigger.in_(["complete", "advance", "fail"])
                )
            ).scalars()
        )
    return epochs, actors


def _claims(run_id: str) -> list[dict[str, Any]]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event.detail)
                .where(Event.run_id == run_id, Event.trigger == "claim")
                .order_by(Event.id)
            ).scalars()
        )


def _take_over(run_id: str) -> None:
    """Wait for the first owner's lease to expire, then let the reaper hand the run on."""

    def expired() -> bool:
        with transaction(readonly=True) as session:
            run = session.get(Run, run_id)
            assert run is not None
            return bool(
                run.state == "running"
                and run.lease_expires_at is not None
                and run.lease_expires_at < utcnow()
            )

    wait_for(expired, timeout=30)
    assert reap() >= 1


@pytest.mark.parametrize("stall", ["effect", "commit"])
def test_late_writer_is_fenced_and_nothing_it_wrote_is_visible(
    db: str, shared_worker: WorkerProcess, stall: str
) -> None:
    # Given a step whose first execution stalls (inside its effect, or before its commit),
    # its process frozen past its two-second lease so that it cannot renew it
    run_id = enqueue_run("late_writer", {"stall": stall})
    pid = int(wait_for(lambda: outside().get(f"stalled:{run_id}"), timeout=30))
    os.kill(pid, signal.SIGSTOP)
    try:
        # When the reaper takes the run over and a second execution finishes it
        _take_over(run_id)
        wait_for(lambda: _finished(run_id), timeout=30)
        run = get_run(run_id)
        assert run.state == "succeeded", run.error
        assert [c["epoch"] for c in _claims(run_id)] == [1, 2]
    finally:
        # ...and only then the stale first execution carries on
        outside().set(f"release:{run_id}", 1)
        os.kill(pid, signal.SIGCONT)
    if stall == "commit":
        wait_for(lambda: outside().get(f"returned:{run_id}"), timeout=30)
    # Then its commit (with the effect's outcome, which goes with it) is refused with a typed
    # error
    wait_for(
        lambda: f"run {run_id}: lease epoch 1 was superseded" in shared_worker.output(),
        timeout=30,
    )
    # And nothing the stale execution wrote is visible: one checkpoint and one transition,
    # both by the new owner, and the ledger holds no outcome from the stale owner
    run = get_run(run_id)
    assert run.checkpoints == 2
    assert run.output["epoch"] == 2
    epochs, actors = _epochs_written(run_id)
    assert epochs == {2}
    assert len(actors) == 1
    [effect] = list_effects(run_id)
    # (the stale owner's outcome would have gone with its commit: the new owner settled it)
    assert (effect.status, effect.epoch) == ("applied", 2)
    assert outside().get(f"fenced:{run_id}") is None
    assert "late" not in effect.receipt
    assert effect.receipt == run.output["receipt"]
    # The outside world saw the effect once (the second owner reconciled or skipped it)
    assert applied(run_id) == 1
    with transaction(readonly=True) as session:
        total = session.execute(
            select(func.count()).select_from(Checkpoint).where(Checkpoint.run_id == run_id)
        ).scalar_one()
    assert total == 2
