"""Contracts, interrupt declarations and payload handling, without any service."""

from __future__ import annotations

import hashlib
import json
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import BaseModel, ValidationError

from models.canonical import canonical_json, evidence_hash
from models.contracts import InterruptView, ResumeContract, ResumeResult
from models.enums import Decision, ExpiryPolicy, InterruptKind, ResumeOutcome
from models.errors import AnswerUnreadableError, BudgetRejectedError, FlowDefinitionError
from worker.engine.answer_binding import ResolvedInterrupt
from worker.engine.commits import PERMANENT_ERRORS
from worker.engine.context import StepContext
from worker.flows.declarations import Suspend, declare
from worker.flows.flow import Flow
from worker.flows.schemas import BudgetGrant, input_schema, json_schema_of, parse_schema_id
from worker.gateway.actors import hash_credential
from worker.gateway.parsing import MAX_PAYLOAD_CHARS, read_payload


@input_schema("unit_review.v3")
class Review(BaseModel):
    verdict: str
    score: int = 0


unit_flow = Flow("unit_contracts", version=1, budget=10)


def _contract(**overrides: Any) -> dict[str, Any]:
    contract: dict[str, Any] = {
        "schema_version": "resume.v1",
        "run_id": "r1",
        "checkpoint_id": "c1",
        "interrupt_id": "i1",
        "actor": {"type": "human", "id": "alice"},
        "decision": "approved",
        "input": {"verdict": "ok"},
        "scope": {"env": "prod"},
        "evidence_hash": "sha256:00",
        "idempotency_key": "k1",
        "expires_at": "2030-01-01T00:00:00Z",
    }
    contract.update(overrides)
    return contract


# --- evidence hashes ---------------------------------------------------------------------


def test_evidence_hash_is_sha256_of_canonical_json() -> None:
    evidence = {"b": [1, 2], "a": {"y": "é", "x": None}}
    canonical = '{"a":{"x":null,"y":"é"},"b":[1,2]}'
    assert canonical_json(evidence) == canonical
    assert evidence_hash(evidence) == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def test_evidence_hash_ignores_key_order_but_not_values() -> None:
    assert evidence_hash({"a": 1, "b": 2}) == evidence_hash({"b": 2, "a": 1})
    assert evidence_hash({"a": 1}) != evidence_hash({"a": 2})
    assert evidence_hash(None) == "sha256:" + hashlib.sha256(b"null").hexdigest()


# --- the resume contract -----------------------------------------------------------------


def test_a_valid_contract_parses_and_is_frozen() -> None:
    contract = ResumeContract.model_validate(_contract())
    assert contract.decision is Decision.APPROVED
    assert contract.expires_at == datetime(2030, 1, 1, tzinfo=UTC)
    assert contract.policy_version is None
    with pytest.raises(ValidationError):
        contract.run_id = "other"  # type: ignore[misc]


@pytest.mark.parametrize(
    ("change", "where"),
    [
        ({"surprise": 1}, "surprise"),
        ({"schema_version": "resume.v2"}, "schema_version"),
        ({"decision": "maybe"}, "decision"),
        ({"actor": {"type": "robot", "id": "x"}}, "actor.type"),
        ({"actor": {"type": "human", "id": "x", "extra": 1}}, "actor.extra"),
        ({"actor": {"type": "human", "id": ""}}, "actor.id"),
        ({"run_id": "r" * 201}, "run_id"),
        ({"input": ["not", "a", "dict"]}, "input"),
        ({"expires_at": "tomorrow"}, "expires_at"),
    ],
)
def test_a_contract_with_a_flaw_is_refused(change: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        ResumeContract.model_validate(_contract(**change))
    assert where in {".".join(str(p) for p in e["loc"]) for e in caught.value.errors()}


@pytest.mark.parametrize(
    ("naive", "aware"),
    [
        ("2030-01-01T14:00:00", "2030-01-01T14:00:00Z"),
        ("2030-01-01T15:00:00", "2030-01-01T15:00:00+01:00"),
        ("2030-01-01 09:00", "2030-01-01T09:00:00-05:00"),
        ("2030-01-01", 1893506400),  # (a Unix time is in UTC)
        (datetime(2030, 1, 1, 14), datetime(2030, 1, 1, 14, tzinfo=UTC)),
    ],
)
def test_a_contract_expiry_needs_a_timezone(naive: Any, aware: Any) -> None:
    # (read as UTC, a responder's local time made the contract valid hours longer or shorter)
    with pytest.raises(ValidationError) as caught:
        ResumeContract.model_validate(_contract(expires_at=naive))
    [error] = caught.value.errors()
    assert error["loc"] == ("expires_at",)
    assert error["msg"] == (
        "needs a timezone, e.g. 2026-12-03T14:00:00Z or 2026-12-03T15:00:00+01:00"
    )
    # The moment with its timezone is that moment
    expires_at = ResumeContract.model_validate(_contract(expires_at=aware)).expires_at
    assert expires_at == datetime(2030, 1, 1, 14, tzinfo=UTC)


def test_the_contract_schema_says_expires_at_needs_a_timezone() -> None:
    described = ResumeContract.model_json_schema()["properties"]["expires_at"]
    assert described["format"] == "date-time"
    assert "timezone" in described["description"]


@pytest.mark.parametrize("field", ["run_id", "interrupt_id", "evidence_hash", "idempotency_key"])
def test_a_contract_missing_a_field_is_refused(field: str) -> None:
    data = _contract()
    del data[field]
    with pytest.raises(ValidationError, match=field):
        ResumeContract.model_validate(data)


def test_result_and_view_helpers() -> None:
    result = ResumeResult(outcome=ResumeOutcome.ACCEPTED, reason="ok", attempt_id=1)
    assert result.accepted
    assert not ResumeResult(outcome=ResumeOutcome.STALE, reason="", attempt_id=2).accepted
    assert "json_schema" in InterruptView.model_fields
    assert {"evidence_hash", "deadline", "on_expiry", "flow_version"} <= set(
        InterruptView.model_fields
    )


# --- what the gateway stores of a submission ----------------------------------------------


def test_payload_of_a_clean_contract_is_its_json() -> None:
    stored, fields, problem = read_payload(_contract())
    assert problem is None
    assert stored == fields == _contract()


def test_payload_accepts_python_values_that_have_a_json_form() -> None:
    moment = datetime(2030, 1, 1, tzinfo=UTC)
    stored, _, problem = read_payload(ResumeContract.model_validate(_contract(expires_at=moment)))
    assert problem is None
    assert stored["expires_at"] == "2030-01-01T00:00:00Z"
    stored, _, problem = read_payload(_contract(expires_at=moment))
    assert problem is None and stored["expires_at"] == "2030-01-01T00:00:00Z"


def test_payload_refuses_what_json_or_the_databases_cannot_hold() -> None:
    stored, _, problem = read_payload(_contract(input={"score": math.inf}))
    assert problem is not None and "not JSON" in problem
    assert "unparseable" in stored
    stored, fields, problem = read_payload(_contract(input={"verdict": "a\x00b\udc80"}))
    assert problem == "contract holds NUL or unpaired surrogate characters"
    assert stored["input"] == {"verdict": "a\\u0000b\\udc80"}
    assert fields["interrupt_id"] == "i1"
    stored, _, problem = read_payload(object())
    assert problem is not None and stored["unparseable"].startswith("<object object")


def test_payload_of_an_oversized_contract_is_truncated_but_keeps_its_ids() -> None:
    stored, fields, problem = read_payload(_contract(input={"verdict": "x" * MAX_PAYLOAD_CHARS}))
    assert problem is not None and "larger than" in problem
    assert len(stored["truncated"]) == MAX_PAYLOAD_CHARS
    assert (fields["run_id"], fields["interrupt_id"]) == ("r1", "i1")


def test_credentials_are_hashed_whatever_text_they_hold() -> None:
    credential = "ilc_secret"
    hashed = hash_credential(credential)
    assert credential not in hashed
    assert hashed == hash_credential(credential)
    assert hashed.startswith("sha256$")
    assert hash_credential("\ud800") != hash_credential("\udc00")


# --- declaring interrupts -----------------------------------------------------------------


def _spec(**overrides: Any) -> Any:
    declaration: dict[str, Any] = {
        "kind": "approval",
        "input": Review,
        "authority": ["approver"],
        "expires_in": 60,
        "evidence": {"doc": 1},
        "scope": {"env": "prod"},
    }
    declaration.update(overrides)
    return declare("review", **declaration)


def test_a_declaration_becomes_a_complete_spec() -> None:
    spec = _spec(reason="look", on_expiry="cancel", separate_from_starter=True)
    assert (spec.name, spec.kind, spec.reason) == ("review", InterruptKind.APPROVAL, "look")
    assert (spec.schema_name, spec.schema_version) == ("unit_review", 3)
    assert spec.json_schema == Review.model_json_schema() == json_schema_of(Review)
    assert spec.roles == ["approver"]
    assert spec.evidence_hash == evidence_hash({"doc": 1})
    assert (spec.expires_in, spec.on_expiry) == (60.0, ExpiryPolicy.CANCEL)
    assert spec.separate_from_starter is True


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({"kind": "chat"}, "'chat' is not a valid InterruptKind"),
        ({"on_expiry": "ignore"}, "'ignore' is not a valid ExpiryPolicy"),
        ({"authority": []}, "authority needs a list of roles"),
        ({"authority": "approver"}, "authority needs a list of roles"),
        ({"authority": ["approver", ""]}, "authority needs a list of roles"),
        ({"evidence": {"when": datetime.now(UTC)}}, "evidence is not JSON"),
        ({"scope": {"x": math.nan}}, "scope is not JSON"),
        ({"expires_in": 0}, "expires_in must be positive"),
        # (a deadline past what a datetime holds failed the step's commit, outside the step)
        ({"expires_in": 1e12}, r"expires_in must be at most 3153600000 seconds \(100 years\)"),
        ({"expires_in": timedelta(days=36600)}, "expires_in must be at most"),
        ({"input": BudgetGrant.__base__}, "is not registered"),
        ({"on_expiry": "escalate"}, "escalate needs escalate_to"),
        ({"on_expiry": "default"}, "default policy needs default="),
        ({"on_expiry": "default", "default": {"score": 1}}, "default input is invalid"),
    ],
)
def test_a_flawed_declaration_is_the_flows_bug(overrides: dict[str, Any], message: str) -> None:
    with pytest.raises(FlowDefinitionError, match=message):
        _spec(**overrides)


@pytest.mark.parametrize("name", ["", "x" * 201, "tab\there", 7])
def test_interrupt_names_must_be_printable_text(name: Any) -> None:
    with pytest.raises(FlowDefinitionError, match="interrupt name"):
        declare(name, kind="approval", input=Review, authority=["a"], expires_in=1)


@pytest.mark.parametrize("name", [["approve"], {"a": 1}, 7, None])
def test_a_step_asking_with_a_name_that_is_not_text_fails_for_good(name: Any) -> None:
    # (a list was looked up among the answers first: TypeError, retried as if transient)
    with pytest.raises(FlowDefinitionError, match="interrupt name"):
        _ask(_ctx(), name)


def test_schema_ids_look_like_name_dot_version() -> None:
    assert parse_schema_id("approval.v1") == ("approval", 1)
    assert parse_schema_id("my-review.v12") == ("my-review", 12)
    for bad in ("approval", "approval.1", "1approval.v1", "approval.vx"):
        with pytest.raises(FlowDefinitionError, match="is not like"):
            parse_schema_id(bad)


@pytest.mark.parametrize("schema_id", ["approval.v0", "approval.v00", "approval.v01", "x.v007"])
def test_schema_versions_start_at_1_and_have_one_spelling(schema_id: str) -> None:
    # ("x.v01" was "x.v1" under another spelling; flows' versions start at 1 too)
    with pytest.raises(FlowDefinitionError) as refused:
        parse_schema_id(schema_id)
    assert str(refused.value) == (
        f"flow definition is invalid: schema id {schema_id!r} is not like 'approval.v1' (a "
        "name, then .v and a version from 1, without leading zeros)"
    )
    with pytest.raises(FlowDefinitionError, match="without leading zeros"):
        input_schema(schema_id)
    assert parse_schema_id("approval.v10") == ("approval", 10)


@pytest.mark.parametrize("schema_id", ["approval.v1\n", 1, None])
def test_a_schema_id_is_one_str_and_nothing_after_it(schema_id: Any) -> None:
    with pytest.raises(FlowDefinitionError, match=r"is not like 'approval\.v1'"):
        parse_schema_id(schema_id)


@pytest.mark.parametrize(
    ("schema_id", "shown"),
    [
        ("x" * 201 + ".v1", "x" * 57 + "..."),
        ("approval.v2147483648", "approval.v2147483648"),
    ],
)
def test_a_schema_id_fits_the_columns_that_store_it(schema_id: str, shown: str) -> None:
    # (beyond them, every step asking with it failed at its commit, outside the step, and its
    # run sat in running until the reaper; PostgreSQL only, SQLite stores anything)
    with pytest.raises(FlowDefinitionError) as refused:
        parse_schema_id(schema_id)
    assert str(refused.value) == (
        f"flow definition is invalid: schema id {shown!r}: a name of at most 200 characters "
        "and a version of at most 2147483647"
    )
    assert parse_schema_id("x" * 200 + ".v2147483647") == ("x" * 200, 2147483647)


# --- the step's view: ctx.interrupt and ctx.consume ---------------------------------------


def _ctx(resolved: dict[str, ResolvedInterrupt] | None = None, **fields: Any) -> StepContext:
    values: dict[str, Any] = {
        "run_id": "r1",
        "flow": unit_flow,
        "step": "s",
        "input": {},
        "state": {},
        "epoch": 1,
        "checkpoint_id": "c1",
        "checkpoint_seq": 1,
        "started_by": None,
        "budget_allowance": 10.0,
        "budget_consumed": 0.0,
        "resolved": resolved or {},
        "effects": {},
    }
    values.update(fields)
    return StepContext(**values)


def _answer(name: str, decision: str, data: dict[str, Any] | None, schema: str = "unit_review"):
    version = 3 if schema == "unit_review" else 1
    # Bound to what ``_ask`` declares: no evidence, no scope.
    bound = evidence_hash(None)
    return {
        name: ResolvedInterrupt(
            f"id-{name}", name, schema, version, decision, data, "bob", evidence_hash=bound
        )
    }


def _ask(ctx: StepContext, name: str = "review") -> Any:
    return ctx.interrupt(name, kind="approval", input=Review, authority=["a"], expires_in=5)


def test_interrupt_without_an_answer_suspends_with_its_spec() -> None:
    with pytest.raises(Suspend) as caught:
        _ask(_ctx())
    assert caught.value.decl.name == "review"
    assert not isinstance(caught.value, Exception)  # a step's `except Exception` cannot eat it


def test_interrupt_with_an_answer_returns_decision_input_and_actor() -> None:
    answer = _ask(_ctx(_answer("review", "approved", {"verdict": "ok", "score": 3})))
    assert (answer.decision, answer.actor, answer.approved) == (Decision.APPROVED, "bob", True)
    assert answer.input == Review(verdict="ok", score=3)
    assert answer.interrupt_id == "id-review"


def test_a_rejection_returns_its_input_or_none() -> None:
    bare = _ask(_ctx(_answer("review", "rejected", {})))
    assert (bare.decision, bare.input, bare.approved) == (Decision.REJECTED, None, False)
    reasoned = _ask(_ctx(_answer("review", "rejected", {"verdict": "no"})))
    assert reasoned.input == Review(verdict="no")


def test_an_answer_this_workers_model_cannot_read_fails_the_step_not_silently() -> None:
    # Given an answer accepted against the model the interrupt was asked with, which this
    # worker's code has changed under the same schema id (score is no longer free text)
    ctx = _ctx(_answer("review", "approved", {"verdict": "ok", "score": "high"}))
    # When the step asks, Then it fails (retried: another worker may have the right code)
    # rather than get an approval with no input, which it could read as "no conditions"
    with pytest.raises(AnswerUnreadableError) as refused:
        _ask(ctx)
    assert str(refused.value) == (
        "the accepted answer to interrupt 'review' does not fit schema unit_review.v3 in this "
        "worker's code (1 error(s), first at score: Input should be a valid integer, unable to "
        "parse string as an integer): deploy the code the interrupt was asked with, or ask "
        "under a new schema version"
    )
    assert not isinstance(refused.value, PERMANENT_ERRORS)


def test_answers_are_found_by_name_only() -> None:
    ctx = _ctx(_answer("first", "approved", {"verdict": "ok"}))
    assert _ask(ctx, "first").approved
    with pytest.raises(Suspend) as caught:
        _ask(ctx, "second")
    assert caught.value.decl.name == "second"


def test_an_interrupt_asked_twice_in_one_execution_is_the_flows_bug() -> None:
    # Given a step that asks "review" per item, and the first ask was answered
    answered = _answer("review", "approved", {"verdict": "ok"})
    ctx = _ctx(answered)
    assert _ask(ctx).approved
    # When it asks "review" again in the same execution, Then it is refused: its one answer
    # would approve every item
    with pytest.raises(FlowDefinitionError) as refused:
        _ask(ctx)
    assert str(refused.value) == (
        "flow definition is invalid: step 's' asks interrupt 'review' twice in one execution, "
        "and its one answer would answer every ask: give each ask its own name "
        "(e.g. f'review-{item.id}')"
    )
    # (and if the step catches it, nothing more happens: an effect raises it again)
    with pytest.raises(FlowDefinitionError, match="asks interrupt 'review' twice"):
        ctx.effect("pay", lambda **_: None)
    # The step's next execution (after a resume, from the top) gets its answer again
    again = _ctx(answered)
    assert _ask(again).approved
    # and a name of its own asks anew
    with pytest.raises(Suspend) as caught:
        _ask(again, "review-2")
    assert caught.value.decl.name == "review-2"


def test_an_unanswered_interrupt_asked_again_after_catching_its_wait_is_refused() -> None:
    ctx = _ctx()
    with pytest.raises(Suspend):
        _ask(ctx)
    with pytest.raises(FlowDefinitionError, match="asks interrupt 'review' twice"):
        _ask(ctx)


def test_consume_within_the_allowance_needs_no_interrupt() -> None:
    ctx = _ctx()
    ctx.consume(4)
    ctx.consume(6)
    assert ctx.budget_consumed == 10
    with pytest.raises(ValueError, match="negative"):
        ctx.consume(-1)
    unlimited = _ctx(budget_allowance=None)
    unlimited.consume(1e9)
    assert unlimited.budget_consumed == 1e9


@pytest.mark.parametrize("units", [math.nan, math.inf, -math.inf, "5", True, None])
def test_consume_refuses_what_is_not_a_finite_number(units: Any) -> None:
    # (NaN made every later comparison false: the run's allowance never ran out again)
    for allowance in (10.0, None):
        ctx = _ctx(budget_consumed=2.0, budget_allowance=allowance)
        with pytest.raises(ValueError) as refused:
            ctx.consume(units)
        assert str(refused.value) == (
            f"budget units must be a finite number, not negative, got {units!r}"
        )
        assert ctx.budget_consumed == 2.0


def test_consume_past_the_allowance_waits_for_a_grant() -> None:
    ctx = _ctx(budget_consumed=8.0)
    with pytest.raises(Suspend) as caught:
        ctx.consume(4)
    spec = caught.value.decl
    assert (spec.name, spec.kind, spec.schema_name) == ("budget.1", InterruptKind.BUDGET, "budget")
    assert spec.roles == ["operator"]
    assert spec.evidence == {"allowance": 10.0, "consumed": 8.0, "requested": 4}
    assert ctx.budget_consumed == 8.0


def test_consume_after_a_grant_goes_on_and_a_refusal_stops_the_run() -> None:
    # The gateway already raised the allowance when it accepted the grant
    granted = _answer("budget.1", "approved", {"units": 5}, schema="budget")
    ctx = _ctx(granted, budget_consumed=8.0, budget_allowance=15.0)
    ctx.consume(4)
    assert ctx.budget_consumed == 12
    refused = _ctx(_answer("budget.1", "rejected", {}, schema="budget"), budget_consumed=8.0)
    with pytest.raises(BudgetRejectedError, match="budget exhausted"):
        refused.consume(4)


def test_json_schema_is_cached_per_model() -> None:
    assert json_schema_of(Review) is json_schema_of(Review)
    assert json.loads(json.dumps(json_schema_of(Review))) == Review.model_json_schema()
