"""The approved call is the executed call: answers bind where the step acts, on both databases.

A resumed step executes again from its beginning and asks again; an answer applies only to
the evidence, scope and policy version it was given for. Work kept with ``ctx.remember``
makes a proposal stable across the ask; ``ctx.review_call`` lets a responder approve, edit or
reject a proposed tool call, and binds the effect to the arguments approved.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.db import transaction
from models.tables import Event, Interrupt
from tests.flows import agents
from tests.resumes import contract_for, drain_finished, drain_pending
from worker import (
    StepContext,
    add_actor,
    enqueue_run,
    get_run,
    list_resume_attempts,
    submit_resume,
)
from worker.flows import flow as registry
from worker.flows.policies import Policy
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


def _events(run_id: str, trigger: str) -> list[dict[str, object]]:
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(Event.detail).where(Event.run_id == run_id, Event.trigger == trigger)
        ).scalars()
        return [dict(row) for row in rows]


def _interrupt(interrupt_id: str) -> Interrupt:
    with transaction(readonly=True) as session:
        found = session.get(Interrupt, interrupt_id)
        assert found is not None
        session.expunge(found)
        return found


def test_a_proposal_that_changes_after_the_approval_is_never_executed(
    db: str, tasks: TaskRecorder
) -> None:
    manager = add_actor("mia", ["manager"])
    # Given a step whose model proposes again at every execution, waiting on the manager
    run_id = enqueue_run("agent_refunds", {"mode": "changing"})
    shown = drain_pending(run_id, "review_call")
    assert shown.evidence == {"call": {"order": "A-1", "amount": 10}}
    # When the manager approves what was shown
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    renewed = drain_pending(run_id, "review_call")
    # Then the step, which now proposes 20, does not execute it: a renewed review asks about
    # 20, superseding the answer, the manager's input kept; nothing was executed
    assert agents.executed(run_id) == []
    assert renewed.evidence == {"call": {"order": "A-1", "amount": 20}}
    assert (renewed.supersedes, renewed.checkpoint_id) == (shown.id, shown.checkpoint_id)
    assert renewed.previous_input == {"note": ""}
    old = _interrupt(shown.id)
    assert (old.status, old.superseded_by) == ("resolved", renewed.id)
    # And an event names both hashes
    [event] = _events(run_id, "review_renewed")
    assert event["answered_hash"] == shown.evidence_hash
    assert event["evidence_hash"] == renewed.evidence_hash
    assert (event["answer"], event["new"]) == (shown.id, renewed.id)
    # When the manager approves 20, the step proposes 30: asked again, never executed
    assert submit_resume(contract_for(renewed, "mia"), manager).accepted
    again = drain_pending(run_id, "review_call")
    assert again.evidence == {"call": {"order": "A-1", "amount": 30}}
    assert agents.executed(run_id) == []


def test_a_remembered_proposal_is_approved_once_and_executed_as_approved(
    db: str, tasks: TaskRecorder
) -> None:
    manager = add_actor("mia", ["manager"])
    # Given the same step keeping its proposal with ctx.remember
    run_id = enqueue_run("agent_refunds", {"mode": "remembered"})
    shown = drain_pending(run_id, "review_call")
    # When the manager approves it
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    # Then the run finishes having executed exactly what was approved, asking the model once
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "A-1", "amount": 10}]
    assert agents.proposals(run_id) == 1
    assert get_run(run_id).output == {"executed": {"order": "A-1", "amount": 10}}
    assert _events(run_id, "review_renewed") == []


def _review(run_id: str) -> tuple[str, dict[str, object]]:
    shown = drain_pending(run_id, "refund")
    return shown.id, dict(shown.evidence)


def test_a_reviewed_call_approved_as_proposed_runs_as_proposed(
    db: str, tasks: TaskRecorder
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    # The reviewer is shown the tool, the call and its context; a manager may approve it
    assert shown.evidence == {
        "tool": "refund",
        "args": {"order": "B-7", "amount": 300},
        "context": {"customer": "c-9"},
    }
    assert shown.roles == ["manager", "finance-lead"]
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 300}]
    assert get_run(run_id).output["edited"] is False


def test_an_edit_within_authority_executes_the_edited_arguments(
    db: str, tasks: TaskRecorder
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    # When the manager edits the amount down to 250 (within a manager's authority)
    edit = {"args": {"order": "B-7", "amount": 250}}
    assert submit_resume(contract_for(shown, "mia", input=edit), manager).accepted
    # Then the edited call is what runs, and the step knows it was edited
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 250}]
    output = get_run(run_id).output
    assert output["edited"] is True and output["executed"] == {"order": "B-7", "amount": 250}


def test_an_edit_beyond_authority_is_denied_and_recorded(db: str, tasks: TaskRecorder) -> None:
    manager = add_actor("mia", ["manager"])
    lead = add_actor("fay", ["finance-lead"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    # When the manager edits the refund up to 5,000 (which needs a finance lead)
    edit = {"args": {"order": "B-7", "amount": 5000}}
    refused = submit_resume(contract_for(shown, "mia", input=edit), manager)
    # Then it is denied, recorded, and the run still waits with nothing executed
    assert refused.outcome == "denied", refused.reason
    assert "finance-lead" in refused.reason
    [attempt] = list_resume_attempts(interrupt_id=shown.id)
    assert attempt.outcome == "denied"
    assert get_run(run_id).state == "waiting" and agents.executed(run_id) == []
    # And a finance lead may make that edit
    assert submit_resume(contract_for(shown, "fay", input=edit), lead).accepted
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 5000}]


def test_a_rejection_returns_its_message_and_executes_nothing(db: str, tasks: TaskRecorder) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    said = {"message": "the order was never delivered; refund the shipping only"}
    rejected = contract_for(shown, "mia", decision="rejected", input=said)
    assert submit_resume(rejected, manager).accepted
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == []
    assert get_run(run_id).output["told_model"] == said["message"]


def test_an_effect_with_other_arguments_than_the_reviewed_call_fails_for_good(
    db: str, tasks: TaskRecorder
) -> None:
    manager = add_actor("mia", ["manager"])
    # Given a step that changes the amount after the review
    run_id = enqueue_run("agent_review", {"amount": 300, "tamper": True})
    shown = drain_pending(run_id, "refund")
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    # Then its effect is refused and the run fails at once, nothing executed
    assert drain_finished(run_id) == "failed"
    run = get_run(run_id)
    assert run.error is not None and "not the call of 'refund' that was approved" in run.error
    assert agents.executed(run_id) == []


def test_an_answer_under_an_old_policy_gets_a_renewed_review(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("policied", {})
    asked = drain_pending(run_id, "go")
    assert asked.policy_version == "p1"
    # When the flow moves to policy p2 while the run waits
    monkeypatch.setattr(agents.policied, "_policy", Policy("p2"))
    # Then an answer given under p1 is not applied: a renewed review under p2, input kept
    result = submit_resume(contract_for(asked, "mia", input={"note": "ok"}), manager)
    assert result.outcome == "renewed_review_required", result.reason
    assert "policy" in result.reason
    renewed = drain_pending(run_id, "go")
    assert (renewed.policy_version, renewed.previous_input) == ("p2", {"note": "ok"})
    # And a contract claiming another policy version than the interrupt's is stale
    claimed = contract_for(renewed, "mia", input={"note": "ok"}, policy_version="p1")
    assert submit_resume(claimed, manager).outcome == "stale"
    assert submit_resume(contract_for(renewed, "mia", input={"note": "p2 ok"}), manager).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {"note": "p2 ok"}


def test_an_answer_accepted_before_the_policy_moved_is_renewed_where_the_step_acts(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("policied", {})
    asked = drain_pending(run_id, "go")
    assert submit_resume(contract_for(asked, "mia", input={"note": "ok"}), manager).accepted
    # When the worker that continues the run has the flow at policy p2
    monkeypatch.setattr(agents.policied, "_policy", Policy("p2"))
    renewed = drain_pending(run_id, "go")
    # Then the p1 answer is not applied where the step acts
    assert (renewed.supersedes, renewed.policy_version) == (asked.id, "p2")
    [event] = _events(run_id, "review_renewed")
    assert (event["answered_policy"], event["policy"]) == ("p1", "p2")


def test_an_old_policy_declared_still_valid_is_honoured(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("policied", {})
    asked = drain_pending(run_id, "go")
    # When the flow moves to p2 declaring p1's approvals still valid
    monkeypatch.setattr(agents.policied, "_policy", Policy("p2", frozenset({"p1"})))
    # Then the p1 answer applies at the gateway and where the step acts
    assert submit_resume(contract_for(asked, "mia", input={"note": "ok"}), manager).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {"note": "ok"}


def _deploy_amounts_v2(monkeypatch: pytest.MonkeyPatch, *, maps: bool) -> None:
    """Version 2 of ``amounts`` replaces version 1: it shows the amount in cents."""
    monkeypatch.setattr(
        registry, "_flows", {k: f for k, f in registry._flows.items() if k[0] != "amounts"}
    )
    v2 = registry.Flow("amounts", version=2)

    @v2.step("pay")
    def pay(ctx: StepContext) -> None:
        ctx.interrupt(
            "go",
            kind="approval",
            input=agents.Go,
            authority=["manager"],
            evidence={"amount_cents": 1000},
            expires_in=600,
        )
        ctx.state["paid_cents"] = 1000

    v2.migrates_from(1)(lambda state: state)
    if maps:
        v2.migrates_evidence(1, "go")(lambda old: {"amount_cents": old["amount"] * 100})


@pytest.mark.parametrize("maps", [False, True], ids=["unmapped", "mapped"])
def test_an_answer_crosses_a_migration_only_for_the_evidence_approved(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch, maps: bool
) -> None:
    manager = add_actor("mia", ["manager"])
    # Given a run of version 1 answered for {"amount": 10}, not yet continued
    run_id = enqueue_run("amounts", {})
    asked = drain_pending(run_id, "go")
    assert submit_resume(contract_for(asked, "mia", input={"note": "ok"}), manager).accepted
    # When version 2, which shows {"amount_cents": 1000}, continues it
    _deploy_amounts_v2(monkeypatch, maps=maps)
    tasks.drain()
    run = get_run(run_id)
    if not maps:
        # Then without a declared mapping the answer does not carry: a renewed review
        assert run.state == "waiting"
        [renewed] = run.pending_interrupts
        assert renewed.evidence == {"amount_cents": 1000}
        assert renewed.previous_input == {"note": "ok"}
    else:
        # Then with the old evidence mapped to the new form, the same approval carries
        assert (run.state, run.output) == ("succeeded", {"paid_cents": 1000})
