"""The resume gateway: every outcome of DESIGN §5, against real workers and both databases.

A refused attempt must leave the run, its checkpoints and its interrupts exactly as they were,
and must be recorded with the payload that was submitted.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import func, select, update

from models import attempts as attempt_store
from models import interrupts as interrupt_store
from models import runs as run_store
from models.contracts import ResumeContract
from models.db import transaction, utcnow
from models.enums import EventKind
from models.errors import StaleStateError
from models.tables import Event, Interrupt, ResumeAttempt, Run
from tests.flows.interrupts import PRICE_UNAVAILABLE, Approval, scratch_redis
from tests.resumes import (
    Waiting,
    approval_waiting_on_alice,
    contract_for,
    drain_finished,
    drain_pending,
    snapshot,
)
from tests.services import statements_sent, wait_for
from worker import (
    add_actor,
    enqueue_run,
    get_interrupt,
    get_run,
    list_resume_attempts,
    revoke_actor,
    set_actor_roles,
    submit_resume,
)
from worker.engine.tasknames import TASK_RESUME
from worker.runs import list_events
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


@pytest.fixture()
def waiting(db: str, tasks: TaskRecorder) -> Waiting:
    """An approval run waiting on its ``approve`` interrupt; alice may approve it."""
    return approval_waiting_on_alice()


def _last_attempt(interrupt_id: str) -> Any:
    attempts = list_resume_attempts(interrupt_id=interrupt_id)
    assert attempts, "the attempt was not recorded"
    return attempts[0]  # newest first


def _attempt(attempt_id: int) -> Any:
    found = [a for a in list_resume_attempts() if a.id == attempt_id]
    assert found, f"attempt {attempt_id} was not recorded"
    return found[0]


def _assert_refused_and_kept(
    w: Waiting, contract: Any, credential: str, outcome: str, reason_part: str
) -> None:
    """Submit; the outcome is a refusal, nothing about the run moved, the attempt was kept."""
    before = snapshot(w.run_id)
    result = submit_resume(contract, credential)
    assert result.outcome == outcome, result.reason
    assert reason_part in result.reason
    assert snapshot(w.run_id) == before
    attempt = _attempt(result.attempt_id)
    assert attempt.outcome == outcome
    assert attempt.reason == result.reason
    expected = (
        contract.model_dump(mode="json") if isinstance(contract, ResumeContract) else contract
    )
    assert attempt.payload == expected
    assert get_run(w.run_id).state == "waiting"


# Each case: (outcome, part of the reason, how to build the contract and credential).
Case = Callable[[Waiting], tuple[Any, str]]


def _past() -> str:
    return (utcnow() - timedelta(seconds=1)).isoformat()


def _no_zone() -> str:
    """An hour from now, written without its timezone: ``2030-01-01T14:00:00.123456``."""
    return (utcnow() + timedelta(hours=1)).replace(tzinfo=None).isoformat()


REFUSALS: dict[str, tuple[str, str, Case]] = {
    "unknown field": (
        "malformed",
        "surprise",
        lambda w: ({**contract_for(w.interrupt, "alice"), "surprise": 1}, w.credential),
    ),
    "missing field": (
        "malformed",
        "evidence_hash",
        lambda w: (
            {k: v for k, v in contract_for(w.interrupt, "alice").items() if k != "evidence_hash"},
            w.credential,
        ),
    ),
    "unknown schema version": (
        "malformed",
        "schema_version",
        lambda w: (contract_for(w.interrupt, "alice", schema_version="resume.v2"), w.credential),
    ),
    "bad decision": (
        "malformed",
        "decision",
        lambda w: (contract_for(w.interrupt, "alice", decision="maybe"), w.credential),
    ),
    "wrong credential": (
        "unauthenticated",
        "credential",
        lambda w: (contract_for(w.interrupt, "alice"), w.credential + "x"),
    ),
    "unknown actor": (
        "unauthenticated",
        "unknown actor",
        lambda w: (contract_for(w.interrupt, "mallory"), w.credential),
    ),
    "wrong checkpoint": (
        "stale",
        "checkpoint",
        lambda w: (contract_for(w.interrupt, "alice", checkpoint_id="0" * 32), w.credential),
    ),
    "wrong run": (
        "stale",
        "run does not match",
        lambda w: (contract_for(w.interrupt, "alice", run_id="f" * 32), w.credential),
    ),
    "unknown interrupt": (
        "stale",
        "no interrupt",
        lambda w: (contract_for(w.interrupt, "alice", interrupt_id="e" * 32), w.credential),
    ),
    "other evidence": (
        "stale",
        "evidence hash",
        lambda w: (contract_for(w.interrupt, "alice", evidence_hash="sha256:00"), w.credential),
    ),
    "other scope": (
        "stale",
        "scope",
        lambda w: (
            contract_for(w.interrupt, "alice", scope={"action": "deploy", "env": "staging"}),
            w.credential,
        ),
    ),
    "contract expired": (
        "expired",
        "contract expired",
        lambda w: (contract_for(w.interrupt, "alice", expires_at=_past()), w.credential),
    ),
    # (read as UTC, a responder's local time made the contract valid hours longer or shorter)
    "contract expiry without a timezone": (
        "malformed",
        "expires_at: needs a timezone, e.g. 2026-12-03T14:00:00Z",
        lambda w: (contract_for(w.interrupt, "alice", expires_at=_no_zone()), w.credential),
    ),
    "input with unknown field": (
        "invalid_input",
        "approval.v1",
        lambda w: (contract_for(w.interrupt, "alice", input={"bogus": True}), w.credential),
    ),
    "input of the wrong type": (
        "invalid_input",
        "amount_limit",
        lambda w: (
            contract_for(w.interrupt, "alice", input={"amount_limit": "lots"}),
            w.credential,
        ),
    ),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_refused_attempt_changes_nothing_and_is_kept(waiting: Waiting, case: str) -> None:
    # Given a run waiting on an approval
    outcome, reason_part, build = REFUSALS[case]
    contract, credential = build(waiting)
    # When a flawed contract is submitted, Then it is refused, recorded and nothing moved
    _assert_refused_and_kept(waiting, contract, credential, outcome, reason_part)
    # And the interrupt can still be released by a correct contract
    result = submit_resume(contract_for(waiting.interrupt, "alice"), waiting.credential)
    assert result.accepted, result.reason
    assert drain_finished(waiting.run_id) == "succeeded"


@pytest.mark.parametrize("contract", [None, "resume", 42, [1, 2], {"schema_version": "resume.v1"}])
def test_anything_that_is_not_a_contract_is_malformed(waiting: Waiting, contract: Any) -> None:
    before = snapshot(waiting.run_id)
    result = submit_resume(contract, waiting.credential)
    assert result.outcome == "malformed"
    assert snapshot(waiting.run_id) == before
    assert _attempt(result.attempt_id).payload == contract


def test_a_pydantic_contract_is_accepted_like_a_dict(waiting: Waiting) -> None:
    contract = ResumeContract.model_validate(contract_for(waiting.interrupt, "alice"))
    result = submit_resume(contract, waiting.credential)
    assert result.accepted, result.reason
    assert _last_attempt(waiting.interrupt.id).payload == contract.model_dump(mode="json")
    assert drain_finished(waiting.run_id) == "succeeded"


def test_accepted_resume_continues_the_run_once(waiting: Waiting, tasks: TaskRecorder) -> None:
    # When alice approves with a comment
    contract = contract_for(waiting.interrupt, "alice", input={"comment": "ship it"})
    result = submit_resume(contract, waiting.credential)
    # Then the attempt is accepted, one resume task is published...
    assert result.accepted, result.reason
    assert result.run_id == waiting.run_id
    assert [(t.name, t.run_id) for t in tasks.pending] == [(TASK_RESUME, waiting.run_id)]
    # ...and the step that asked resumes with her answer
    assert drain_finished(waiting.run_id) == "succeeded"
    run = get_run(waiting.run_id)
    assert run.output == {
        "prepared": True,
        "decision": "approved",
        "approved_by": "alice",
        "comment": "ship it",
        "finished": True,
    }
    interrupt = get_interrupt(waiting.interrupt.id)
    assert interrupt.status == "resolved"
    assert interrupt.decision == "approved"
    assert interrupt.resolved_by == "alice"
    assert interrupt.resume_input == {"comment": "ship it", "amount_limit": None}
    assert _last_attempt(waiting.interrupt.id).outcome == "accepted"
    assert run.pending_interrupts == []
    # And the resume was its own claim with a fresh fencing epoch, by the resume task
    with transaction(readonly=True) as session:
        moves = session.execute(
            select(Event.trigger, Event.actor, Event.from_state, Event.detail)
            .where(Event.run_id == waiting.run_id, Event.to_state.is_not(None))
            .order_by(Event.id)
        ).all()
    suspend = [m.trigger for m in moves].index("suspend")
    accept, claim = moves[suspend + 1], moves[suspend + 2]
    assert (accept.trigger, accept.actor, accept.from_state) == (
        "accept_resume",
        "human:alice",
        "waiting",
    )
    assert (claim.trigger, claim.from_state) == ("claim", "resuming")
    before = [m.detail["epoch"] for m in moves[:suspend] if m.trigger == "claim"]
    assert claim.detail == {"epoch": max(before) + 1, "step": "gate"}


def test_an_accepted_resume_reads_in_two_statements(
    db: str, backend: str, waiting: Waiting
) -> None:
    # Given alice's approval, When it is submitted
    contract = contract_for(waiting.interrupt, "alice")
    with statements_sent(db) as sent:
        result = submit_resume(contract, waiting.credential)
    assert result.accepted, result.reason
    if backend == "postgresql":
        # Then on PostgreSQL the gateway read once (the actor with the attempt that claimed
        # the key, none yet, the interrupt and its run) and wrote once, without a transaction
        # around them: the run's move with its event, the interrupt's resolution and the
        # attempt that accepted it, guarded on the interrupt still pending and the actor
        # still as authenticated (worker.gateway.at_once)
        assert sent == ["SELECT", "WITH"], sent
    else:
        # ...on SQLite, in its transaction, it read twice: the actor with the attempt that
        # claimed the key, then the interrupt with its run; everything else was a write
        assert sent.count("SELECT") == 2, sent
    assert get_interrupt(waiting.interrupt.id).status == "resolved"
    assert _attempt(result.attempt_id).outcome == "accepted"
    # ...and a second submission with the same key is answered from one read in the
    # transaction (on PostgreSQL after the read that found the key used, which left the
    # answer to the transaction)
    with statements_sent(db) as again:
        repeat = submit_resume(contract, waiting.credential)
    assert repeat.outcome.value == "duplicate"
    assert again.count("SELECT") == (2 if backend == "postgresql" else 1), again


def _as_read(waiting: Waiting) -> tuple[Interrupt, Run]:
    """The pending interrupt and its run as this process read them, detached."""
    with transaction(readonly=True) as session:
        seen = interrupt_store.get(session, waiting.interrupt.id)
        run = session.get(Run, waiting.run_id)
        assert seen is not None and run is not None
        session.expunge(run)
    assert seen.status == "pending" and run.state == "waiting"
    return seen, run


def _accept_as_alice(session: Any, seen: Interrupt, run: Run) -> Any:
    """The gateway's write for alice's accepted resume of ``seen``: the run's move, the
    interrupt's resolution and the attempt, in one statement; the attempt's id or None."""
    resolve, _ = interrupt_store.transition_write(seen, "resolve", resolved_by="alice")
    record = attempt_store.attempt_write(
        {"interrupt_id": seen.id, "outcome": "accepted", "reason": "approved by alice"}
    )
    return run_store.move_recorded(
        session,
        session.merge(run, load=False),
        EventKind.ACCEPT_RESUME,
        actor="human:alice",
        writes=[resolve],
        then=record,
        dispatched_at=utcnow(),
    )


def test_a_resolution_that_lost_its_race_records_no_attempt(waiting: Waiting) -> None:
    # Given the pending interrupt and its waiting run as this process read them
    seen, run = _as_read(waiting)
    # and another process resolving the interrupt first
    with transaction() as session:
        other = interrupt_store.get(session, waiting.interrupt.id)
        assert other is not None
        assert interrupt_store.transition(session, other, "resolve", resolved_by="bob")
    attempts = len(list_resume_attempts(interrupt_id=waiting.interrupt.id))
    # When this process moves the run with the interrupt's resolution and the attempt that
    # accepted it, as the gateway does
    with pytest.raises(LookupError), transaction() as session:
        recorded = _accept_as_alice(session, seen, run)
        # Then the resolution matched nothing, so the attempt was not written
        assert recorded is None
        raise LookupError("roll back, as the gateway does")  # (its _LostRace)
    # ...and nothing of it remains: no attempt says it was accepted, the first resolution
    # stands, the run still waits
    assert len(list_resume_attempts(interrupt_id=waiting.interrupt.id)) == attempts
    assert get_interrupt(waiting.interrupt.id).resolved_by == "bob"
    assert get_run(waiting.run_id).state == "waiting"
    assert seen.status == "pending"


def test_a_resume_whose_run_moved_first_writes_nothing_in_its_statement(
    waiting: Waiting,
) -> None:
    # Given the waiting run and its interrupt as this process read them
    seen, run = _as_read(waiting)
    # and another process moving the run first
    with transaction() as session:
        session.execute(
            update(Run).where(Run.id == run.id).values(state_version=Run.state_version + 1)
        )
    with transaction() as session:
        # When this process moves the run with the resolution and the attempt riding along
        with pytest.raises(StaleStateError):
            _accept_as_alice(session, seen, run)
        # Then its statement wrote nothing, as seen inside the transaction before any rollback
        status = select(Interrupt.status).where(Interrupt.id == seen.id)
        assert session.execute(status).scalar_one() == "pending"
        recorded = select(func.count()).where(ResumeAttempt.interrupt_id == seen.id)
        assert session.execute(recorded).scalar_one() == 0


def test_a_rejection_is_returned_to_the_step(waiting: Waiting) -> None:
    result = submit_resume(
        contract_for(waiting.interrupt, "alice", decision="rejected"), waiting.credential
    )
    assert result.accepted, result.reason
    assert drain_finished(waiting.run_id) == "succeeded"
    output = get_run(waiting.run_id).output
    assert output["decision"] == "rejected"
    assert output["comment"] is None


def test_interrupt_deadline_passed_is_expired(db: str, tasks: TaskRecorder) -> None:
    credential = add_actor("alice", ["approver"])
    run_id = enqueue_run("approval", {"env": "prod", "expires_in": 1})
    interrupt = drain_pending(run_id)
    wait_for(lambda: utcnow() > interrupt.deadline, timeout=10)
    w = Waiting(run_id, interrupt, credential)
    _assert_refused_and_kept(
        w, contract_for(interrupt, "alice"), credential, "expired", "deadline passed"
    )


def test_revoked_actor_is_unauthenticated(waiting: Waiting) -> None:
    revoke_actor("alice")
    _assert_refused_and_kept(
        waiting,
        contract_for(waiting.interrupt, "alice"),
        waiting.credential,
        "unauthenticated",
        "revoked",
    )


def test_a_human_credential_cannot_answer_as_a_service(waiting: Waiting) -> None:
    # Given alice, added as a person, claiming to be a service in her contract
    contract = contract_for(waiting.interrupt, "alice", actor={"type": "service", "id": "alice"})
    # Then the refusal is kept under her id, and her key stays free for a right retry
    _assert_refused_and_kept(
        waiting,
        contract,
        waiting.credential,
        "unauthenticated",
        "actor alice is a human, not a service: answer as human:alice",
    )
    assert _last_attempt(waiting.interrupt.id).actor_id == "alice"
    retried = submit_resume(
        {**contract, "actor": {"type": "human", "id": "alice"}}, waiting.credential
    )
    assert retried.outcome == "accepted", retried.reason


def test_a_service_credential_cannot_answer_as_a_person(waiting: Waiting) -> None:
    # Given a service account holding the approver role
    bot = add_actor("approve-bot", ["approver"], kind="service")
    as_person = contract_for(waiting.interrupt, "approve-bot")
    # When it claims to be a person, it is refused and nothing moves
    _assert_refused_and_kept(
        waiting, as_person, bot, "unauthenticated", "approve-bot is a service, not a human"
    )
    # And as what it is, it answers, recorded as a service
    as_service = {**as_person, "actor": {"type": "service", "id": "approve-bot"}}
    assert submit_resume(as_service, bot).outcome == "accepted"
    assert get_interrupt(waiting.interrupt.id).resolved_by == "approve-bot"
    assert [e.actor for e in list_events(waiting.run_id) if e.trigger == "accept_resume"] == [
        "service:approve-bot"
    ]


def test_actor_without_the_role_is_denied(waiting: Waiting) -> None:
    credential = add_actor("bob", ["viewer", "finance"])
    _assert_refused_and_kept(
        waiting, contract_for(waiting.interrupt, "bob"), credential, "denied", "bob"
    )


def test_role_removed_while_the_run_waited_is_denied(waiting: Waiting) -> None:
    # Given alice held the role when the interrupt was raised, and lost it since
    set_actor_roles("alice", ["viewer"])
    _assert_refused_and_kept(
        waiting, contract_for(waiting.interrupt, "alice"), waiting.credential, "denied", "roles"
    )
    # When she gets it back, her resume is accepted
    set_actor_roles("alice", ["approver"])
    assert submit_resume(contract_for(waiting.interrupt, "alice"), waiting.credential).accepted


def test_the_starter_cannot_approve_a_separated_interrupt(db: str, tasks: TaskRecorder) -> None:
    alice = add_actor("alice", ["approver"])
    bob = add_actor("bob", ["approver"])
    run_id = enqueue_run("guarded", {}, started_by="alice")
    interrupt = drain_pending(run_id)
    assert interrupt.separate_from_starter is True
    w = Waiting(run_id, interrupt, alice)
    _assert_refused_and_kept(
        w, contract_for(interrupt, "alice"), alice, "denied", "started this run"
    )
    # Another approver may
    assert submit_resume(contract_for(interrupt, "bob"), bob).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {"signed_by": "bob"}


def test_schema_drift_is_invalid_input(waiting: Waiting) -> None:
    # Given the interrupt was raised against a different shape of approval.v1 than this
    # process knows (a deployment changed the model without bumping its version)
    with transaction() as session:
        session.execute(
            update(Interrupt)
            .where(Interrupt.id == waiting.interrupt.id)
            .values(json_schema={"title": "Approval", "type": "object", "properties": {}})
        )
    _assert_refused_and_kept(
        waiting,
        contract_for(waiting.interrupt, "alice"),
        waiting.credential,
        "invalid_input",
        "changed",
    )


def test_a_schema_registered_nowhere_here_is_refused_as_unknown_schema(waiting: Waiting) -> None:
    # Given an interrupt whose input schema no flow loaded in this process registers
    with transaction() as session:
        session.execute(
            update(Interrupt)
            .where(Interrupt.id == waiting.interrupt.id)
            .values(schema_name="retired-approval")
        )
    # Then the resume is refused as unknown_schema, says so, and nothing moved
    _assert_refused_and_kept(
        waiting,
        contract_for(waiting.interrupt, "alice"),
        waiting.credential,
        "unknown_schema",
        "input schema retired-approval.v1 is registered by none of the flows loaded here",
    )


def test_a_revalidation_that_fails_is_a_recorded_refusal_that_changes_nothing(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a price approval raised while the price was 10
    credential = add_actor("alice", ["approver"])
    redis = scratch_redis()
    redis.set("price:sku-4", "10")
    run_id = enqueue_run("priced", {"sku": "sku-4"})
    waiting = drain_pending(run_id)
    # When the price service is down as alice approves
    redis.set("price:sku-4", PRICE_UNAVAILABLE)
    before = snapshot(run_id)
    result = submit_resume(contract_for(waiting, "alice"), credential)
    # Then a review is asked again, naming the failure, with no new interrupt and nothing moved
    assert result.outcome == "renewed_review_required"
    assert result.reason.startswith("business revalidation failed (ConnectionError")
    assert result.new_interrupt_id is None
    assert snapshot(run_id) == before
    assert get_interrupt(waiting.id).status == "pending"
    assert _last_attempt(waiting.id).outcome == "renewed_review_required"
    # When the service is back with the same price, the same answer under a new key is accepted
    redis.set("price:sku-4", "10")
    assert submit_resume(contract_for(waiting, "alice"), credential).accepted


def test_renewed_review_when_the_evidence_changed(db: str, tasks: TaskRecorder) -> None:
    # Given a price approval raised while the price was 10
    credential = add_actor("alice", ["approver"])
    redis = scratch_redis()
    redis.set("price:sku-9", "10")
    run_id = enqueue_run("priced", {"sku": "sku-9"})
    old = drain_pending(run_id)
    assert old.evidence == {"sku": "sku-9", "price": "10"}
    # When the price changes before alice approves what she was shown
    redis.set("price:sku-9", "12")
    before = snapshot(run_id)
    contract = contract_for(old, "alice", input={"comment": "fine at 10"})
    result = submit_resume(contract, credential)
    # Then a new review is required against the new evidence, and the run still waits
    assert result.outcome == "renewed_review_required", result.reason
    after = snapshot(run_id)
    assert after["run"] == before["run"]
    assert after["checkpoints"] == before["checkpoints"]
    assert get_run(run_id).state == "waiting"
    superseded = get_interrupt(old.id)
    assert superseded.status == "superseded"
    assert result.new_interrupt_id is not None
    assert superseded.superseded_by == result.new_interrupt_id
    renewed = get_interrupt(result.new_interrupt_id)
    assert renewed.status == "pending"
    assert renewed.supersedes == old.id
    assert renewed.evidence == {"sku": "sku-9", "price": "12"}
    assert renewed.evidence_hash != old.evidence_hash
    assert renewed.previous_input == {"comment": "fine at 10", "amount_limit": None}
    assert renewed.checkpoint_id == old.checkpoint_id
    assert renewed.state_version == old.state_version
    assert [i.id for i in get_run(run_id).pending_interrupts] == [renewed.id]
    attempt = _last_attempt(old.id)
    assert (attempt.outcome, attempt.payload) == ("renewed_review_required", contract)
    # And the flow is notified of the new interrupt, after it committed, by its own tasks
    assert [t.notice.interrupt_id for t in tasks.pending if t.notice is not None] == [
        renewed.id,
        renewed.id,
    ]
    tasks.drain()
    assert len(redis.lrange(f"notified:{run_id}", 0, -1)) == 2
    # And the old contract can no longer release anything
    again = submit_resume(contract_for(old, "alice"), credential)
    assert again.outcome == "stale"
    # When alice approves the renewed review, the run continues at the new price
    assert submit_resume(contract_for(renewed, "alice"), credential).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {"price": "12", "comment": ""}


def test_stale_contract_after_the_run_moved_on(db: str, tasks: TaskRecorder) -> None:
    # Given a run that was released at checkpoint N and now waits at checkpoint N+1
    credentials = {a: add_actor(a, [r]) for a, r in [("lee", "legal"), ("fin", "finance")]}
    credentials["ops"] = add_actor("ops", ["ops"])
    run_id = enqueue_run("multi_gate", {})
    legal = drain_pending(run_id, "legal")
    assert submit_resume(contract_for(legal, "lee"), credentials["lee"]).accepted
    finance = drain_pending(run_id, "finance")
    receipt = {"invoice": "INV-1", "total": 12.5}
    assert submit_resume(contract_for(finance, "fin", input=receipt), credentials["fin"]).accepted
    shipped = drain_pending(run_id, "shipped")
    assert shipped.checkpoint_id != finance.checkpoint_id
    w = Waiting(run_id, shipped, credentials["ops"])
    # When a contract for checkpoint N arrives, for the old interrupt or for the new one
    old = contract_for(finance, "fin", input=receipt)
    _assert_refused_and_kept(w, old, credentials["fin"], "stale", "interrupt is resolved")
    mixed = contract_for(shipped, "ops", checkpoint_id=finance.checkpoint_id)
    _assert_refused_and_kept(w, mixed, credentials["ops"], "stale", "checkpoint")
    # Then both were refused and kept, and the right contract still works
    event = contract_for(shipped, "ops", input={"tracking": "TRK-1"})
    assert submit_resume(event, credentials["ops"]).accepted
    assert drain_finished(run_id) == "succeeded"


def test_duplicate_returns_the_first_outcome_without_a_second_continuation(
    db: str, tasks: TaskRecorder
) -> None:
    credential = add_actor("alice", ["approver"])
    run_id = enqueue_run("raced", {})
    interrupt = drain_pending(run_id)
    contract = contract_for(interrupt, "alice", key="the-one-key")
    # When the same contract is submitted twice
    first = submit_resume(contract, credential)
    second = submit_resume(contract, credential)
    # Then the first is accepted, the second is a visible duplicate of it
    assert first.accepted, first.reason
    assert second.outcome == "duplicate"
    assert second.original_outcome == "accepted"
    assert str(first.attempt_id) in second.reason
    assert drain_finished(run_id) == "succeeded"
    # And a third, after the run finished, is still only a duplicate
    third = submit_resume(contract, credential)
    assert (third.outcome, third.original_outcome) == ("duplicate", "accepted")
    attempts = list_resume_attempts(interrupt_id=interrupt.id)
    assert [a.outcome for a in attempts] == ["duplicate", "duplicate", "accepted"]  # newest first
    assert all(a.idempotency_key == "the-one-key" for a in attempts)
    # And the run continued exactly once
    assert int(scratch_redis().get(f"raced:after:{run_id}") or 0) == 1
    with transaction(readonly=True) as session:
        accepts = session.execute(
            select(Event.id).where(Event.run_id == run_id, Event.trigger == "accept_resume")
        ).all()
    assert len(accepts) == 1


def test_duplicate_of_a_refusal_returns_the_refusal(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", input={"bogus": 1}, key="k-1")
    assert submit_resume(contract, waiting.credential).outcome == "invalid_input"
    before = snapshot(waiting.run_id)
    again = submit_resume(contract, waiting.credential)
    assert (again.outcome, again.original_outcome) == ("duplicate", "invalid_input")
    assert snapshot(waiting.run_id) == before


def test_unauthenticated_attempt_does_not_burn_the_key(waiting: Waiting) -> None:
    # An attacker guessing the key cannot block the real responder's submission
    contract = contract_for(waiting.interrupt, "alice", key="shared-key")
    assert submit_resume(contract, "ilc_guess").outcome == "unauthenticated"
    assert submit_resume(contract, waiting.credential).accepted


def test_resume_input_is_validated_into_the_model(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", input={"amount_limit": "7"})
    assert submit_resume(contract, waiting.credential).accepted
    assert get_interrupt(waiting.interrupt.id).resume_input == Approval(amount_limit=7).model_dump()
