"""A credential pasted into what an actor submits is kept nowhere another actor can read it
(issue 42, finding 1): not in the accepted input, the timeline, a renewed review's previous
input, the events, nor what a notifier is handed. On SQLite and PostgreSQL."""

from __future__ import annotations

import json
import uuid

import pytest

from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for, drain_finished, drain_pending
from tests.webclient import api_headers, sign_in, web_client
from worker import (
    add_actor,
    cancel_run,
    enqueue_run,
    get_interrupt,
    get_run,
    list_resume_attempts,
    send_event,
    submit_resume,
)
from worker.cli import main
from worker.runs import list_events
from worker.testing import TaskRecorder

# What stands where a credential was (literal here: the test must fail where nothing redacts).
REDACTED = "ilc_[redacted]"
# Shaped like a credential interlude issues, but nobody's: redacted all the same.
SOMEONE_ELSES = "ilc_" + "Zq7" * 14


def _everything_readable(run_id: str, capsys: pytest.CaptureFixture[str], olga: str) -> str:
    """What actors and operators can read of the run, as one text."""
    shown = [
        get_run(run_id).model_dump_json(),
        json.dumps([e.model_dump(mode="json") for e in list_events(run_id)]),
        json.dumps([a.model_dump(mode="json") for a in list_resume_attempts(run_id=run_id)]),
    ]
    capsys.readouterr()
    assert main(["--json", "runs", "show", run_id]) == 0
    assert main(["runs", "show", run_id, "--wide"]) == 0
    shown.append(capsys.readouterr().out)
    with web_client() as client:
        answer = client.get(f"/v1/runs/{run_id}", headers=api_headers("olga", olga))
        assert answer.status_code == 200, answer.text
        shown.append(answer.text)
    return "\n".join(shown)


def test_a_credential_pasted_into_an_accepted_answer_is_kept_nowhere(
    db: str, tasks: TaskRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given alice's pending approval, and an operator who reads the run
    alice = add_actor("alice", ["approver"])
    olga = add_actor("olga", ["operator"])
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = drain_pending(run_id)
    # When alice answers with her own credential, and another, pasted into the comment
    comment = f"deploy with {alice} (or {SOMEONE_ELSES})"
    result = submit_resume(contract_for(interrupt, "alice", input={"comment": comment}), alice)
    # Then the answer is accepted as it was given, but for the credentials
    assert result.outcome == "accepted", result.reason
    assert drain_finished(run_id) == "succeeded"
    kept = f"deploy with {REDACTED} (or {REDACTED})"
    assert get_interrupt(interrupt.id).resume_input == {"comment": kept, "amount_limit": None}
    # (the step was handed what was stored: what was checked is what it acts on)
    assert get_run(run_id).flow_state["comment"] == kept
    # And no record anyone reads holds either credential
    readable = _everything_readable(run_id, capsys, olga)
    assert kept in readable
    assert alice not in readable
    assert SOMEONE_ELSES not in readable


def test_a_renewed_review_keeps_the_earlier_input_without_the_credential(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a price approval shown at 10, and the price changes before alice's answer
    alice = add_actor("alice", ["approver"])
    redis = scratch_redis()
    sku = f"sku-{uuid.uuid4().hex[:6]}"
    redis.set(f"price:{sku}", "10")
    run_id = enqueue_run("priced", {"sku": sku})
    old = drain_pending(run_id)
    redis.set(f"price:{sku}", "12")
    # When she answers with her credential in the comment
    contract = contract_for(old, "alice", input={"comment": f"fine, token {alice}"})
    result = submit_resume(contract, alice)
    assert result.outcome == "renewed_review_required", result.reason
    assert result.new_interrupt_id is not None
    # Then the renewed review keeps her input, redacted
    renewed = get_interrupt(result.new_interrupt_id)
    assert renewed.previous_input == {"comment": f"fine, token {REDACTED}", "amount_limit": None}
    # And so does what the flow's notifier is handed about the renewed review
    tasks.drain()
    notes = [json.loads(n) for n in redis.lrange(f"notified:{run_id}", 0, -1)]
    assert [n["previous_input"] for n in notes if n["id"] == renewed.id] == [renewed.previous_input]
    assert alice not in json.dumps(notes)
    # And the inbox page of the renewed review fills the form in without it
    with web_client() as client:
        sign_in(client, "alice", alice)
        page = client.get(f"/inbox/interrupts/{renewed.id}")
        assert page.status_code == 200
        assert "fine, token ilc_[redacted]" in page.text
        assert alice not in page.text


def test_an_operators_reason_is_recorded_without_a_credential(db: str, tasks: TaskRecorder) -> None:
    olga = add_actor("olga", ["operator"])
    run_id = enqueue_run("approval", {"env": "prod"})
    drain_pending(run_id)
    cancel_run(run_id, actor="olga", credential=olga, reason=f"leaked {SOMEONE_ELSES}, sorry")
    run = get_run(run_id)
    assert run.error == f"leaked {REDACTED}, sorry"
    details = json.dumps([e.detail for e in list_events(run_id)])
    assert f"leaked {REDACTED}, sorry" in details
    assert SOMEONE_ELSES not in details


def test_a_credential_pasted_into_an_event_is_kept_nowhere(db: str, tasks: TaskRecorder) -> None:
    # Given a run of the payment flow, which waits for the bank's event
    bank = add_actor("bank", ["payments"], kind="service")
    run_id = enqueue_run("payment", {})
    # When the bank sends it before the run asks, with its credential in the reference
    sent = send_event(
        run_id,
        "payment_received",
        {"reference": f"PO-1 {bank}", "amount": 5},
        actor="bank",
        credential=bank,
        idempotency_key="k-1",
    )
    # Then the event is kept, and what is kept holds no credential
    assert sent.outcome == "kept", sent.reason
    [kept] = get_run(run_id).kept_events
    assert kept.payload == {"reference": f"PO-1 {REDACTED}", "amount": 5}
    # And the run takes it as kept
    assert drain_finished(run_id) == "succeeded"
    readable = get_run(run_id).model_dump_json() + json.dumps(
        [e.model_dump(mode="json") for e in list_events(run_id)]
    )
    assert bank not in readable
