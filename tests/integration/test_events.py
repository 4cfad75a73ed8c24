"""Events that arrive first: kept in the run's mailbox, they answer its wait when it asks.

Sending an event authenticates and authorizes like a resume and validates the payload at
once; every refusal is recorded; a second send with one key is a duplicate.
"""

from __future__ import annotations

import pytest

from tests.resumes import drain_finished
from worker import (
    add_actor,
    enqueue_run,
    get_run,
    list_resume_attempts,
    send_event,
)
from worker.runs import list_events
from worker.testing import TaskRecorder, drain

pytestmark = pytest.mark.usefixtures("scratch")
PAID = {"reference": "PO-17", "amount": 1200}


@pytest.fixture()
def payments(db: str) -> str:
    return add_actor("bank", ["payments"], kind="service")


def _send(credential: str, run_id: str, name: str = "payment_received", **over: object) -> object:
    values: dict[str, object] = {
        "payload": PAID,
        "actor": "bank",
        "credential": credential,
        "idempotency_key": "k-1",
    }
    values.update(over)
    return send_event(run_id, name, **values)  # type: ignore[arg-type]


def test_an_event_sent_before_the_ask_answers_it_without_a_wait(
    payments: str, tasks: TaskRecorder
) -> None:
    # Given a run that has not reached the step waiting for the payment
    run_id = enqueue_run("payment", {})
    # When the bank sends the payment first
    sent = _send(payments, run_id)
    # Then it is kept, and the run lists it
    assert sent.outcome == "kept", sent.reason
    [kept] = get_run(run_id).kept_events
    assert (kept.name, kept.sender, kept.payload) == ("payment_received", "bank", PAID)
    # And when the run asks for it, the kept event answers at once: the run finishes
    assert drain_finished(run_id) == "succeeded"
    run = get_run(run_id)
    assert run.output["paid"] == 1200 and run.output["sender"] == "bank"
    assert run.kept_events == []
    [delivered] = [e for e in list_events(run_id) if e.trigger == "event_delivered"]
    assert delivered.actor == "bank" and "arrived_at" in delivered.detail


def test_an_event_for_a_waiting_run_answers_its_wait(payments: str, tasks: TaskRecorder) -> None:
    run_id = enqueue_run("payment", {})
    drain()
    assert get_run(run_id).state == "waiting"
    sent = _send(payments, run_id)
    assert sent.outcome == "accepted", sent.reason
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output["paid"] == 1200


def test_an_event_sent_twice_with_one_key_is_a_duplicate(
    payments: str, tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("payment", {})
    assert _send(payments, run_id).outcome == "kept"
    again = _send(payments, run_id)
    assert again.outcome == "duplicate" and again.original_outcome == "kept"
    assert len(get_run(run_id).kept_events) == 1
    # The same key with another payload is refused
    other = _send(payments, run_id, payload={"reference": "PO-18", "amount": 5})
    assert other.outcome == "key_reused"


def test_refused_events_are_recorded(payments: str, tasks: TaskRecorder) -> None:
    clerk = add_actor("clerk", ["sales"], kind="service")
    run_id = enqueue_run("payment", {})
    refusals = {
        "denied": _send(clerk, run_id, actor="clerk", idempotency_key="c-1"),
        "unauthenticated": _send("wrong", run_id, idempotency_key="w-1"),
        "invalid_input": _send(payments, run_id, idempotency_key="p-1", payload={"amount": 0}),
    }
    undeclared = _send(payments, run_id, name="shipment_sent", idempotency_key="u-1")
    for outcome, result in refusals.items():
        assert result.outcome == outcome, (outcome, result.reason)
    assert undeclared.outcome == "invalid_input" and "takes no event" in undeclared.reason
    assert get_run(run_id).kept_events == []
    recorded = {a.outcome for a in list_resume_attempts(run_id=run_id)}
    assert recorded >= {"denied", "unauthenticated", "invalid_input"}
    # An event for a finished run is stale
    _send(payments, run_id, idempotency_key="ok-1")
    assert drain_finished(run_id) == "succeeded"
    late = _send(payments, run_id, idempotency_key="late-1")
    assert late.outcome == "stale" and "succeeded" in late.reason


def test_whichever_of_two_events_comes_first(payments: str, tasks: TaskRecorder) -> None:
    run_id = enqueue_run("payment", {"either": True})
    drain()
    asks = {i.name for i in get_run(run_id).pending_interrupts}
    assert asks == {"payment_received", "payment_cancelled"}
    cancelled = _send(payments, run_id, name="payment_cancelled", payload={"reason": "void"})
    assert cancelled.outcome == "accepted", cancelled.reason
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output["outcome"] == ["payment_cancelled"]


@pytest.mark.parametrize(
    "over",
    [
        {"idempotency_key": "k\x00"},
        {"payload": {"reference": "PO\x00", "amount": 1}},
        {"payload": {"ref\x00": "x"}},
        {"actor": "ba\x00nk"},
    ],
    ids=["key", "value", "field", "actor"],
)
def test_an_event_with_text_no_database_stores_is_malformed_and_recorded(
    payments: str, tasks: TaskRecorder, over: dict[str, object]
) -> None:
    # (Found by the API's fuzzing: on PostgreSQL a NUL in the key failed the sender's lookup,
    # then the recording of that failure, and the server answered 500.)
    run_id = enqueue_run("payment", {})
    sent = _send(payments, run_id, **over)
    assert sent.outcome == "malformed"
    assert "NUL or unpaired surrogate characters" in sent.reason
    [attempt] = list_resume_attempts(run_id=run_id)
    assert (attempt.id, attempt.outcome) == (sent.attempt_id, "malformed")
    assert get_run(run_id).kept_events == []


def test_an_event_with_a_key_longer_than_200_characters_is_malformed_and_recorded(
    payments: str, tasks: TaskRecorder
) -> None:
    # (Found by the API's fuzzing: on PostgreSQL recording the refusal failed on the key's
    # column, and the server answered 500.)
    run_id = enqueue_run("payment", {})
    sent = _send(payments, run_id, idempotency_key="k" * 201)
    assert sent.outcome == "malformed"
    assert "idempotency_key" in sent.reason
    [attempt] = list_resume_attempts(run_id=run_id)
    assert attempt.outcome == "malformed" and attempt.idempotency_key == "k" * 200
