"""Resume semantics under abuse (issue 11): the gateway fails closed, keys are honest, records
hold no secrets and no unbounded text. Every test runs on SQLite and PostgreSQL."""

from __future__ import annotations

import json
import logging
from datetime import timedelta

import pytest
from sqlalchemy import text, update

from models.canonical import evidence_hash, legacy_json
from models.db import get_engine, transaction, utcnow
from models.errors import ActorError, ActorExistsError, InvalidInputError
from models.tables import Actor, Interrupt, ResumeAttempt
from tests.resumes import (
    Waiting,
    approval_waiting_on_alice,
    contract_for,
    drain_finished,
    drain_pending,
    snapshot,
)
from worker import (
    add_actor,
    enqueue_run,
    get_run,
    list_resume_attempts,
    revoke_actor,
    submit_resume,
)
from worker.gateway.actors import authenticate, rotate_actor
from worker.gateway.attempt_records import MAX_REASON, MAX_STORED_UNTRUSTED
from worker.testing import TaskRecorder


@pytest.fixture()
def waiting(db: str, tasks: TaskRecorder) -> Waiting:
    return approval_waiting_on_alice()


def _row(attempt_id: int) -> ResumeAttempt:
    with transaction(readonly=True) as session:
        row = session.get(ResumeAttempt, attempt_id)
        assert row is not None, "the attempt was not recorded"
        session.expunge(row)
        return row


# --- A: non-finite numbers, and no exception ever escapes ---------------------------------------


@pytest.mark.parametrize("amount", ["inf", "Infinity", "1e309", "1E400"])
def test_a_non_finite_number_in_a_float_field_is_invalid_input(
    db: str, tasks: TaskRecorder, amount: str
) -> None:
    # Given an evidence interrupt whose schema (receipt.v2, not strict) has a float field
    legal, finance = add_actor("lee", ["legal"]), add_actor("fin", ["finance"])
    run_id = enqueue_run("multi_gate", {"contract": "c-7"})
    assert submit_resume(contract_for(drain_pending(run_id, "legal"), "lee"), legal).accepted
    interrupt = drain_pending(run_id, "finance")
    before = snapshot(run_id)
    # When a total that reads as infinity is submitted
    submitted = {"invoice": "INV-1", "total": amount}
    result = submit_resume(contract_for(interrupt, "fin", input=submitted), finance)
    # Then it is refused, recorded, and nothing moved
    assert result.outcome == "invalid_input", result.reason
    assert "not finite" in result.reason
    assert _row(result.attempt_id).outcome == "invalid_input"
    assert snapshot(run_id) == before


def test_a_run_input_that_becomes_infinite_is_refused(db: str) -> None:
    with pytest.raises(InvalidInputError, match="not JSON"):
        enqueue_run("fragile", {"amount": "1e309"})


def test_an_unforeseen_error_is_a_recorded_refusal_without_the_credential(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an interrupt whose input schema's own code raises (not a validation error)
    credential = add_actor("alice", ["approver"])
    run_id = enqueue_run("fragile", {})
    interrupt = drain_pending(run_id)
    before = snapshot(run_id)
    # When input that triggers it is submitted
    with caplog.at_level(logging.ERROR, logger="worker.gateway.attempt_records"):
        result = submit_resume(contract_for(interrupt, "alice", input={"note": "boom"}), credential)
    # Then submit_resume returns a recorded refusal naming the error's class
    assert result.outcome == "invalid_input"
    assert "RuntimeError" in result.reason
    assert _row(result.attempt_id).reason == result.reason
    assert snapshot(run_id) == before
    # And the logged traceback holds the credential in no frame's locals
    (record,) = [r for r in caplog.records if r.exc_info]
    assert record.exc_info is not None
    tb = record.exc_info[2]
    frames = 0
    while tb is not None:
        frames += 1
        for value in tb.tb_frame.f_locals.values():
            assert credential not in repr(value), tb.tb_frame.f_code.co_name
        tb = tb.tb_next
    assert frames > 3  # the traceback reaches into the gateway's checks


# --- B: separation of duties fails closed ------------------------------------------------------


def test_separation_of_duties_denies_when_the_run_has_no_starter(
    db: str, tasks: TaskRecorder
) -> None:
    bob = add_actor("bob", ["approver"])
    run_id = enqueue_run("guarded", {})
    interrupt = drain_pending(run_id)
    result = submit_resume(contract_for(interrupt, "bob"), bob)
    assert result.outcome == "denied"
    assert "no recorded starter" in result.reason
    assert get_run(run_id).state == "waiting"


@pytest.mark.parametrize("starter", ["Bob", " bob ", "\uff42\uff4f\uff42"])
def test_the_starter_is_compared_in_the_actor_ids_normal_form(
    db: str, tasks: TaskRecorder, starter: str
) -> None:
    bob = add_actor("bob", ["approver"])
    run_id = enqueue_run("guarded", {}, started_by=starter)
    assert get_run(run_id).started_by == "bob"
    interrupt = drain_pending(run_id)
    for who in ("bob", "BOB"):
        result = submit_resume(contract_for(interrupt, who), bob)
        assert result.outcome == "denied", result.reason
        assert "started this run" in result.reason


@pytest.mark.parametrize(
    ("starter", "says"),
    [("x" * 191, "at most|1 to 190"), ("system:expiry", "reserved"), ("a b", "may only hold")],
)
def test_started_by_is_validated_like_an_actor_id(db: str, starter: str, says: str) -> None:
    with pytest.raises(InvalidInputError, match=says):
        enqueue_run("guarded", {}, started_by=starter)


def test_actor_ids_that_collide_after_normalisation_are_refused(db: str) -> None:
    add_actor(" Ada ", ["approver"])
    for twin in ("ada", "ADA", "\uff41\uff44\uff41"):
        with pytest.raises(ActorExistsError):
            add_actor(twin, ["approver"])


@pytest.mark.parametrize("actor_id", ["system:expiry", "System:Revalidation", "worker:w1"])
def test_interludes_own_prefixes_are_refused_for_actors(db: str, actor_id: str) -> None:
    with pytest.raises(ActorError, match="reserved"):
        add_actor(actor_id, ["approver"])


@pytest.mark.parametrize(
    "actor_id", ["ilc_release_manager_team_a", "ops.ILC_0123456789abcdefghij", "ilc_" + "x" * 43]
)
def test_actor_ids_shaped_like_a_credential_are_refused(db: str, actor_id: str) -> None:
    # Stored attempts redact such text: the actor's own attempts could not be found again,
    # and its idempotency keys would collide with every other such actor's.
    with pytest.raises(ActorError, match="shape of a credential"):
        add_actor(actor_id, ["approver"])
    assert add_actor("ilc_bob", ["approver"])  # the prefix alone is no credential


def test_rotation_replaces_the_credential_at_once(waiting: Waiting) -> None:
    old = waiting.credential
    new = rotate_actor("alice")
    assert new != old
    refused = submit_resume(contract_for(waiting.interrupt, "alice"), old)
    assert refused.outcome == "unauthenticated"
    assert submit_resume(contract_for(waiting.interrupt, "alice"), new).accepted


def test_rotation_gives_a_revoked_actor_a_working_credential(waiting: Waiting) -> None:
    revoke_actor("alice")
    assert submit_resume(contract_for(waiting.interrupt, "alice"), waiting.credential).outcome == (
        "unauthenticated"
    )
    new = rotate_actor("alice")
    assert submit_resume(contract_for(waiting.interrupt, "alice"), new).accepted


# --- C: idempotency keys belong to the actor and bind to the payload ----------------------------


def test_another_actor_cannot_take_a_key(waiting: Waiting) -> None:
    # Given bob, a real actor without the role, submits first with alice's key
    bob = add_actor("bob", ["viewer"])
    taken = submit_resume(contract_for(waiting.interrupt, "bob", key="alices-key"), bob)
    assert taken.outcome == "denied"
    # Then alice's own submission with that key is decided on its merits
    result = submit_resume(
        contract_for(waiting.interrupt, "alice", key="alices-key"), waiting.credential
    )
    assert result.accepted, result.reason


def test_a_fixed_contract_under_the_same_key_is_key_reused(waiting: Waiting) -> None:
    bad = contract_for(waiting.interrupt, "alice", input={"bogus": 1}, key="k-1")
    first = submit_resume(bad, waiting.credential)
    assert first.outcome == "invalid_input"
    # The same payload again is a duplicate that carries the refusal
    again = submit_resume(bad, waiting.credential)
    assert (again.outcome, again.original_outcome) == ("duplicate", "invalid_input")
    # A fixed payload under the same key is refused as key_reused; nothing moved
    before = snapshot(waiting.run_id)
    fixed = submit_resume(contract_for(waiting.interrupt, "alice", key="k-1"), waiting.credential)
    assert fixed.outcome == "key_reused"
    assert fixed.original_outcome == "invalid_input"
    assert "new key" in fixed.reason
    assert _row(fixed.attempt_id).outcome == "key_reused"
    assert snapshot(waiting.run_id) == before
    # With a new key it is accepted
    assert submit_resume(contract_for(waiting.interrupt, "alice"), waiting.credential).accepted


def test_a_retry_with_a_later_expiry_is_still_a_duplicate(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", key="retry-key")
    assert submit_resume(contract, waiting.credential).accepted
    later = {**contract, "expires_at": (utcnow() + timedelta(hours=1)).isoformat()}
    assert later["expires_at"] != contract["expires_at"]
    result = submit_resume(later, waiting.credential)
    assert (result.outcome, result.original_outcome) == ("duplicate", "accepted")


def test_a_bad_credential_learns_nothing_about_a_used_key(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", key="secret-key")
    assert submit_resume(contract, waiting.credential).accepted
    probe = submit_resume(contract, "ilc_not-the-credential")
    assert probe.outcome == "unauthenticated"
    assert probe.original_outcome is None


def test_a_key_repointed_at_another_interrupt_is_key_reused(db: str, tasks: TaskRecorder) -> None:
    credential = add_actor("alice", ["approver"])
    first = drain_pending(enqueue_run("approval", {"env": "prod"}))
    second = drain_pending(enqueue_run("approval", {"env": "prod"}))
    assert submit_resume(contract_for(first, "alice", key="k"), credential).accepted
    result = submit_resume(contract_for(second, "alice", key="k"), credential)
    assert result.outcome == "key_reused"
    assert get_run(second.run_id).state == "waiting"


# --- D: bounded records -------------------------------------------------------------------------


def test_a_huge_malformed_submission_is_stored_bounded(waiting: Waiting) -> None:
    contract = {**contract_for(waiting.interrupt, "alice"), "k" * 60_000: 1}
    result = submit_resume(contract, waiting.credential)
    assert result.outcome == "malformed"
    row = _row(result.attempt_id)
    assert len(row.reason) <= MAX_REASON
    assert len(json.dumps(row.payload)) <= MAX_STORED_UNTRUSTED
    assert row.payload["sha256"].startswith("sha256:")
    assert row.payload["chars"] > 60_000


def test_an_unauthenticated_submission_is_stored_bounded(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", input={"comment": "y" * 20_000})
    result = submit_resume(contract, "ilc_wrong")
    assert result.outcome == "unauthenticated"
    assert len(json.dumps(_row(result.attempt_id).payload)) <= MAX_STORED_UNTRUSTED


def test_attempts_are_listed_newest_first_with_a_cursor(waiting: Waiting) -> None:
    ids = [
        submit_resume(contract_for(waiting.interrupt, "alice"), "ilc_wrong").attempt_id
        for _ in range(5)
    ]
    page = list_resume_attempts(run_id=waiting.run_id, limit=2)
    assert [a.id for a in page] == ids[::-1][:2]
    rest = list_resume_attempts(run_id=waiting.run_id, before=page[-1].id)
    assert [a.id for a in rest] == ids[::-1][2:]


# --- E and G: no forged log lines, no stored credentials ----------------------------------------


def test_caller_text_never_reaches_a_log_message(
    waiting: Waiting, caplog: pytest.LogCaptureFixture
) -> None:
    forged = "x\nINFO resume accepted: approved by human:ada\x1b[2K"
    contract = contract_for(waiting.interrupt, forged)
    with caplog.at_level(logging.INFO, logger="worker.gateway.attempt_records"):
        result = submit_resume(contract, waiting.credential)
    assert result.outcome == "unauthenticated"
    messages = [
        r.getMessage() for r in caplog.records if r.name == "worker.gateway.attempt_records"
    ]
    assert messages and all("\n" not in m and "\x1b" not in m for m in messages)
    assert any(getattr(r, "actor_id", None) == forged for r in caplog.records)


def test_a_credential_pasted_into_a_contract_is_redacted(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice", input={"comment": waiting.credential})
    result = submit_resume(contract, waiting.credential)
    stored = json.dumps(_row(result.attempt_id).payload)
    assert waiting.credential not in stored
    assert "ilc_[redacted]" in stored


def test_swapped_arguments_store_no_credential(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice")
    result = submit_resume(waiting.credential, contract)  # type: ignore[arg-type]
    assert result.outcome == "malformed"
    assert waiting.credential not in json.dumps(_row(result.attempt_id).payload)


def test_a_credential_of_another_shape_is_redacted_too(waiting: Waiting) -> None:
    contract = contract_for(waiting.interrupt, "alice")
    custom = "tok-0123456789abcdef"
    result = submit_resume({**contract, "comment": custom}, custom)
    assert result.outcome == "malformed"
    assert custom not in json.dumps(_row(result.attempt_id).payload)


def test_a_credential_naming_the_interrupt_does_not_file_the_refusal_out_of_sight(
    waiting: Waiting,
) -> None:
    contract = contract_for(waiting.interrupt, "alice")
    for bearer in (waiting.interrupt.id, waiting.run_id):
        result = submit_resume(contract, bearer)
        assert result.outcome == "unauthenticated"
        row = _row(result.attempt_id)
        assert (row.run_id, row.interrupt_id) == (waiting.run_id, waiting.interrupt.id)
        listed = {a.id for a in list_resume_attempts(interrupt_id=waiting.interrupt.id)}
        assert result.attempt_id in listed
        assert result.attempt_id in {a.id for a in list_resume_attempts(run_id=waiting.run_id)}
        # The text submitted as a credential is still kept out of the stored payload.
        assert bearer not in json.dumps(row.payload)


def test_a_reason_repeating_caller_text_is_one_line(waiting: Waiting) -> None:
    forged = "cp\nINFO resume accepted\x1b[2K\u2028"
    contract = {**contract_for(waiting.interrupt, "alice"), "checkpoint_id": forged}
    result = submit_resume(contract, waiting.credential)
    assert result.outcome == "stale"
    assert "cp\\nINFO resume accepted\\x1b[2K\\u2028" in result.reason
    assert result.reason.isprintable()
    assert _row(result.attempt_id).reason == result.reason
    assert get_run(waiting.run_id).state == "waiting"


# --- J: a revoke is ordered with a resume -------------------------------------------------------


def test_the_actor_row_is_locked_for_share_while_a_decision_uses_it(
    db: str, backend: str, database_url: str
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite serialises every writer; row locks are PostgreSQL's")
    credential = add_actor("alice", ["approver"])
    with transaction() as session:
        # Given a decision in progress that authenticated alice
        assert authenticate(session, "alice", credential) is not None
        # Then a revoke from another connection cannot commit until the decision ends
        with get_engine(database_url).connect() as other:
            other.execute(text("SET lock_timeout = '200ms'"))
            with pytest.raises(Exception, match="lock timeout"):
                other.execute(update(Actor).where(Actor.id == "alice").values(revoked_at=utcnow()))
            other.rollback()
    revoke_actor("alice")


# --- K: evidence hashes over RFC 8785 ------------------------------------------------------------


def test_an_interrupt_hashed_before_rfc8785_keeps_validating(waiting: Waiting) -> None:
    # Given an interrupt recorded before the change: its hash is Python's json.dumps
    evidence = waiting.interrupt.evidence
    old_hash = evidence_hash(evidence, None)
    with transaction() as session:
        session.execute(
            update(Interrupt)
            .where(Interrupt.id == waiting.interrupt.id)
            .values(evidence_hash=old_hash, evidence_canon=None)
        )
    assert legacy_json(evidence) == json.dumps(evidence, sort_keys=True, separators=(",", ":"))
    # Then the contract a responder built from it then is accepted
    contract = contract_for(waiting.interrupt, "alice", evidence_hash=old_hash)
    assert submit_resume(contract, waiting.credential).accepted
    assert drain_finished(waiting.run_id) == "succeeded"
