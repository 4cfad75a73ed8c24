"""Binding at the act, remembered values, tool-call declarations and policy versions, without
services: what the step's context decides by itself."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from models.canonical import evidence_hash
from models.errors import EffectError, FlowDefinitionError, InvalidToolCallError
from worker.engine.answer_binding import ResolvedInterrupt, mismatch
from worker.engine.context import StepContext
from worker.flows.declarations import Suspend, declare
from worker.flows.flow import Flow
from worker.flows.policies import NO_POLICY, Policy, checked_policy
from worker.flows.schemas import input_schema
from worker.flows.toolcalls import ReviewedCall


@input_schema("unit_bind.v1")
class Ok(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


@input_schema("unit_transfer.v1")
class Transfer(BaseModel):
    model_config = ConfigDict(extra="forbid")

    to: str
    cents: int


flow = Flow("unit_binding", version=1)
flow.tool("transfer", args=Transfer, authority=lambda a: ["big"] if a.cents > 100 else ["small"])


def _ctx(resolved: dict[str, ResolvedInterrupt] | None = None, **fields: Any) -> StepContext:
    values: dict[str, Any] = {
        "run_id": "r1",
        "flow": flow,
        "step": "s",
        "input": {},
        "state": {},
        "epoch": 1,
        "checkpoint_id": "c1",
        "checkpoint_seq": 1,
        "started_by": None,
        "budget_allowance": None,
        "budget_consumed": 0.0,
        "resolved": resolved or {},
        "effects": {},
    }
    values.update(fields)
    return StepContext(**values)


def _answered(evidence: Any, scope: Any = None, **fields: Any) -> ResolvedInterrupt:
    values: dict[str, Any] = {
        "id": "i1",
        "name": "go",
        "schema_name": "unit_bind",
        "schema_version": 1,
        "decision": "approved",
        "resume_input": {"note": "yes"},
        "resolved_by": "bob",
        "evidence_hash": evidence_hash(evidence),
        "scope": scope,
    }
    values.update(fields)
    return ResolvedInterrupt(**values)


def _ask(ctx: StepContext, evidence: Any, scope: Any = None) -> Any:
    return ctx.interrupt(
        "go",
        kind="approval",
        input=Ok,
        authority=["a"],
        evidence=evidence,
        scope=scope,
        expires_in=60,
    )


def test_an_answer_applies_to_the_evidence_and_scope_it_was_given_for() -> None:
    ctx = _ctx({"go": _answered({"amount": 10}, {"env": "prod"})})
    answer = _ask(ctx, {"amount": 10}, {"env": "prod"})
    assert answer.approved and answer.input == Ok(note="yes")


@pytest.mark.parametrize(
    ("evidence", "scope", "what"),
    [
        ({"amount": 20}, {"env": "prod"}, "evidence"),
        ({"amount": 10}, {"env": "staging"}, "scope"),
    ],
)
def test_other_evidence_or_scope_at_the_act_renews_the_review(
    evidence: Any, scope: Any, what: str
) -> None:
    ctx = _ctx({"go": _answered({"amount": 10}, {"env": "prod"})})
    with pytest.raises(Suspend) as asked:
        _ask(ctx, evidence, scope)
    decl = asked.value.decl
    assert (decl.supersedes, decl.previous_input) == ("i1", {"note": "yes"})
    renewal = ctx.renewals["i1"]
    assert renewal["answer"] == "i1"
    assert renewal["answered_hash"] == evidence_hash({"amount": 10})
    assert renewal["evidence_hash"] == evidence_hash(evidence)
    assert renewal.get("scope_changed", False) is (what == "scope")


def test_an_answer_recorded_before_rfc8785_is_compared_as_it_was_hashed() -> None:
    legacy = _answered({"amount": 1.0}, evidence_canon=None)
    legacy = ResolvedInterrupt(
        **{**legacy.__dict__, "evidence_hash": evidence_hash({"amount": 1.0}, None)}
    )
    decl = declare(
        "go", kind="approval", input=Ok, authority=["a"], evidence={"amount": 1.0}, expires_in=9
    )
    assert mismatch(legacy, decl, NO_POLICY) is None


def test_policy_versions_honoured_and_not() -> None:
    assert Policy("p2", frozenset({"p1"})).honours("p1")
    assert not Policy("p2").honours("p1")
    assert not Policy("p2").honours(None)
    assert Policy("p2", frozenset({None})).honours(None)
    for bad in ("", 2, "x" * 65):
        with pytest.raises(FlowDefinitionError):
            checked_policy("f", bad)
    with pytest.raises(FlowDefinitionError, match="list of policy versions"):
        checked_policy("f", "p2", "p1")
    with pytest.raises(FlowDefinitionError, match="needs a policy_version"):
        checked_policy("f", None, ["p1"])


def test_remember_calls_once_and_returns_the_json_kept() -> None:
    calls: list[int] = []

    def propose() -> tuple[int, int]:
        calls.append(1)
        return (1, 2)

    ctx = _ctx()
    assert ctx.remember("p", propose) == [1, 2]  # the JSON form, as the next execution sees it
    assert ctx.remember("p", propose) == [1, 2]
    assert len(calls) == 1 and ctx.remembered_more
    # A later execution at the same checkpoint reads it without calling
    again = _ctx(remembered={"p": [1, 2]})
    assert again.remember("p", propose) == [1, 2] and len(calls) == 1
    assert not again.remembered_more


def test_remember_refuses_what_json_cannot_keep() -> None:
    with pytest.raises(FlowDefinitionError, match="'p' is not JSON"):
        _ctx().remember("p", object)


def test_a_review_of_an_undeclared_tool_or_a_malformed_call_is_refused() -> None:
    with pytest.raises(FlowDefinitionError, match="does not declare"):
        _ctx().review_call("wire", {"to": "x", "cents": 1}, expires_in=60)
    with pytest.raises(InvalidToolCallError, match="cents"):
        _ctx().review_call("transfer", {"to": "x", "cents": "lots"}, expires_in=60)


def test_a_review_asks_the_roles_the_policy_gives_for_the_proposed_call() -> None:
    with pytest.raises(Suspend) as asked:
        _ctx().review_call("transfer", {"to": "x", "cents": 500}, expires_in=60)
    decl = asked.value.decl
    assert decl.roles == ["big"]
    assert decl.evidence == {"tool": "transfer", "args": {"to": "x", "cents": 500}}
    assert decl.schema_name == "unit_transfer-review"


def _call(approved: bool = True, cents: int = 5) -> ReviewedCall:
    args = Transfer(to="x", cents=cents)
    return ReviewedCall("transfer", "i1", approved, args, args, False, "", "bob")


@pytest.mark.parametrize(
    ("call", "args", "kwargs", "why"),
    [
        (_call(approved=False), (), {"to": "x", "cents": 5}, "was rejected"),
        (_call(), ("x",), {"cents": 5}, "by keyword"),
        (_call(), (), {"to": "x", "cents": 6}, "not the call"),
        (_call(), (), {"to": "x", "cents": 5, "extra": 1}, "not the call"),
    ],
)
def test_an_effect_runs_only_the_reviewed_call_as_approved(
    call: ReviewedCall, args: tuple[Any, ...], kwargs: dict[str, Any], why: str
) -> None:
    with pytest.raises(EffectError, match=why):
        _ctx().effect("transfer", lambda *a, **k: None, *args, reviewed=call, **kwargs)
