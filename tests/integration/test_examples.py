"""The example flows end to end, executed in-process (``drain``), on both backends."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import func, select

from examples import agent, deploy_gate, procurement, records
from models.contracts import InterruptView
from models.db import transaction
from models.errors import InvalidInputError
from models.tables import Effect, Event
from tests.flows import agent_models
from tests.resumes import contract_for
from worker import add_actor, enqueue_run, get_interrupt, get_run, submit_resume
from worker.testing import TaskRecorder, drain

FINISHED = {"succeeded", "failed", "cancelled", "expired"}
ITEMS = [{"sku": "VLV-200", "description": "gate valve DN200", "quantity": 4, "unit_price": 310.0}]
CERTIFICATE = {
    "certificate_id": "EC-7781",
    "engineer": "Ada Lovelace",
    "conclusion": "fit_for_purpose",
}


@pytest.fixture(scope="module", autouse=True)
def example_tables(database_url: str) -> Iterator[None]:
    """The examples' own tables exist during these tests and are gone after them."""
    records.ensure_tables()
    yield
    # They are not interlude's schema: leave the database as the migrations made it.
    records.drop_tables()


def contract(interrupt: InterruptView, actor: str, **overrides: Any) -> dict[str, Any]:
    return contract_for(interrupt, actor, **overrides)


def waiting_on(run_id: str) -> InterruptView:
    drain()
    run = get_run(run_id)
    assert run.state not in FINISHED, f"run finished early: {run.state} {run.error}"
    assert run.pending_interrupts, f"run {run_id} is {run.state}, not waiting"
    return run.pending_interrupts[0]


def finished(run_id: str) -> str:
    drain()
    state = get_run(run_id).state
    assert state in FINISHED, f"run {run_id} is {state}, not finished"
    return state


def effect_statuses(run_id: str) -> dict[str, str]:
    with transaction(readonly=True) as session:
        rows = session.execute(select(Effect.name, Effect.status).where(Effect.run_id == run_id))
        return {name: status for name, status in rows}


def counter(run_id: str, trigger: str) -> int:
    with transaction(readonly=True) as session:
        found = session.execute(
            select(func.count()).where(Event.run_id == run_id, Event.trigger == trigger)
        ).scalar_one()
    return int(found)


def test_procurement_renewed_review_then_one_order(tasks: TaskRecorder) -> None:
    # Given an engineer, a buyer, and a purchase request from a supplier that is not sanctioned
    engineer = add_actor("eng.ada", ["engineer"])
    buyer = add_actor("buyer.bo", ["buyer"])
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    supplier = f"acme-valves-{request_id.lower()}"
    procurement.submit_request(request_id, supplier, ITEMS)
    # When the run starts it screens the supplier once and waits for a certificate
    run_id = enqueue_run("procurement", {"request_id": request_id})
    first = waiting_on(run_id)
    assert (first.kind, first.schema_id) == ("evidence", "certificate.v1")
    assert first.roles == ["engineer"]
    assert first.evidence["revision"] == 1 and first.evidence["amount"] == 1240.0
    assert procurement.supplier_checks(supplier) == 1

    # When the buyer changes the request while it waits, the engineer's resume is not accepted:
    # the old input is kept on a new interrupt with the current evidence
    procurement.amend_request(request_id, [{**ITEMS[0], "quantity": 6}])
    renewed = submit_resume(contract(first, "eng.ada", input=CERTIFICATE), engineer)
    assert renewed.outcome == "renewed_review_required", renewed.reason
    second = get_interrupt(renewed.new_interrupt_id or "")
    assert get_interrupt(first.id).status == "superseded"
    assert second.previous_input == {**CERTIFICATE, "notes": ""}
    assert second.evidence["revision"] == 2 and second.evidence["amount"] == 1860.0
    assert get_run(run_id).state == "waiting"
    # ... the old contract is now stale, and the buyer may not certify at all
    stale = submit_resume(contract(first, "eng.ada", input=CERTIFICATE), engineer)
    assert stale.outcome == "stale", stale.reason
    denied = submit_resume(contract(second, "buyer.bo", input=CERTIFICATE), buyer)
    assert denied.outcome == "denied", denied.reason

    # When the engineer certifies the current revision
    accepted = submit_resume(contract(second, "eng.ada", input=CERTIFICATE), engineer)
    assert accepted.outcome == "accepted", accepted.reason

    # Then the order for revision 2 is placed once, and the supplier was screened only once
    assert finished(run_id) == "succeeded", get_run(run_id).error
    output = get_run(run_id).output
    assert output["outcome"] == "ordered"
    assert output["certified_by"] == "eng.ada"
    orders = procurement.orders_for(request_id)
    assert len(orders) == 1
    assert orders[0]["amount"] == 1860.0 and orders[0]["certificate_id"] == "EC-7781"
    assert output["order"]["order_id"] == orders[0]["id"]
    assert procurement.supplier_checks(supplier) == 1
    assert effect_statuses(run_id) == {"supplier_check": "applied", "place_order": "applied"}
    # The certify step ran again after the wait and reused the recorded check
    assert counter(run_id, "effect_skipped") == 1


def test_procurement_unchanged_request_is_accepted_by_a_process_new_to_its_tables(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a purchase request waiting for a certificate, and not changed since
    engineer = add_actor("eng.ada", ["engineer"])
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    procurement.submit_request(request_id, f"acme-valves-{request_id.lower()}", ITEMS)
    run_id = enqueue_run("procurement", {"request_id": request_id})
    waiting = waiting_on(run_id)
    # And a process that has not used the examples' tables yet (a fresh `interlude serve`):
    # its revalidator, reading the request inside the gateway's transaction, checks them first
    monkeypatch.setattr(records, "_ready", set())
    # When the engineer certifies the request she was shown
    result = submit_resume(contract(waiting, "eng.ada", input=CERTIFICATE), engineer)
    # Then it is accepted (on SQLite it was a renewed review: checking the tables took the write
    # lock the gateway's own transaction held, until the busy timeout)
    assert result.outcome == "accepted", result.reason
    assert get_interrupt(waiting.id).status == "resolved"
    assert finished(run_id) == "succeeded", get_run(run_id).error
    assert len(procurement.orders_for(request_id)) == 1


def test_procurement_sanctioned_supplier_finishes_without_waiting(tasks: TaskRecorder) -> None:
    # Given a request from a sanctioned supplier
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    procurement.submit_request(request_id, "obsidian-holdings", ITEMS)
    # When it runs
    run_id = enqueue_run("procurement", {"request_id": request_id})
    # Then it is blocked at screening: no certificate asked, no order placed
    assert finished(run_id) == "succeeded"
    run = get_run(run_id)
    assert run.output["outcome"] == "supplier_blocked"
    assert run.output["supplier_check"]["result"] == "sanctioned"
    assert run.pending_interrupts == []
    assert procurement.orders_for(request_id) == []


def test_procurement_not_fit_certificate_places_no_order(tasks: TaskRecorder) -> None:
    # Given a waiting request
    engineer = add_actor("eng.grace", ["engineer"])
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    procurement.submit_request(request_id, "acme-valves", ITEMS)
    run_id = enqueue_run("procurement", {"request_id": request_id})
    interrupt = waiting_on(run_id)
    # When the engineer certifies the items as not fit for purpose
    not_fit = {**CERTIFICATE, "conclusion": "not_fit_for_purpose"}
    result = submit_resume(contract(interrupt, "eng.grace", input=not_fit), engineer)
    assert result.outcome == "accepted", result.reason
    # Then the run finishes without an order
    assert finished(run_id) == "succeeded"
    assert get_run(run_id).output["outcome"] == "not_certified"
    assert procurement.orders_for(request_id) == []


def test_procurement_rejects_bad_certificates_and_unknown_requests(tasks: TaskRecorder) -> None:
    # Given a waiting request
    engineer = add_actor("eng.linus", ["engineer"])
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    procurement.submit_request(request_id, "acme-valves", ITEMS)
    run_id = enqueue_run("procurement", {"request_id": request_id})
    interrupt = waiting_on(run_id)
    # When the certificate lacks its conclusion, it is refused as invalid input
    bad = {k: v for k, v in CERTIFICATE.items() if k != "conclusion"}
    result = submit_resume(contract(interrupt, "eng.linus", input=bad), engineer)
    assert result.outcome == "invalid_input"
    assert "conclusion" in result.reason
    assert get_run(run_id).state == "waiting"
    # And a run needs a request id; an unknown request cannot be amended
    with pytest.raises(InvalidInputError, match="request_id"):
        enqueue_run("procurement", {})
    # And a run for a request the purchasing system does not hold is refused at enqueue
    with pytest.raises(InvalidInputError, match="no purchase request 'PR-nope': submit it"):
        enqueue_run("procurement", {"request_id": "PR-nope"})
    with pytest.raises(InvalidInputError, match="no purchase request"):
        procurement.amend_request("PR-missing", ITEMS)


DIFF = "--- a/app.py\n+++ b/app.py\n@@ -1 +1 @@\n-RETRIES = 3\n+RETRIES = 5\n"


def test_deploy_gate_binds_approval_to_scope_and_diff_then_deploys_once(
    tasks: TaskRecorder,
) -> None:
    # Given a requester and a release manager, and a production deployment asked for
    requester = add_actor("dev.kim", ["release-manager"])
    manager = add_actor("rm.lee", ["release-manager"])
    request = {"service": "payments", "environment": "production", "version": "1.4.2"}
    run_id = enqueue_run("deploy_gate", {**request, "diff": DIFF}, started_by="dev.kim")
    interrupt = waiting_on(run_id)
    assert interrupt.kind == "approval"
    assert interrupt.scope == {"service": "payments", "environment": "production"}
    assert interrupt.evidence == {"version": "1.4.2", "diff_hash": deploy_gate.diff_hash(DIFF)}
    approval = {"change_ticket": "CHG-1042"}

    # When approvals are bound to another environment or another diff, they are stale
    other_env = contract(
        interrupt,
        "rm.lee",
        input=approval,
        scope={"service": "payments", "environment": "staging"},
    )
    result = submit_resume(other_env, manager)
    assert (result.outcome, "scope" in result.reason) == ("stale", True)
    other_diff = contract(
        interrupt, "rm.lee", input=approval, evidence_hash=deploy_gate.diff_hash(DIFF + "x")
    )
    result = submit_resume(other_diff, manager)
    assert (result.outcome, "evidence" in result.reason) == ("stale", True)
    # ... and the requester may not approve their own deployment
    result = submit_resume(contract(interrupt, "dev.kim", input=approval), requester)
    assert result.outcome == "denied"
    assert deploy_gate.deployments_of("payments", "production") == []

    # When the release manager approves the diff on record
    result = submit_resume(contract(interrupt, "rm.lee", input=approval), manager)
    assert result.outcome == "accepted", result.reason

    # Then it is deployed once, with the approved diff
    assert finished(run_id) == "succeeded", get_run(run_id).error
    deployed = deploy_gate.deployments_of("payments", "production")
    assert len(deployed) == 1
    assert deployed[0]["diff_hash"] == deploy_gate.diff_hash(DIFF)
    output = get_run(run_id).output
    assert output["outcome"] == "deployed" and output["change_ticket"] == "CHG-1042"
    assert output["deployment"]["deployment_id"] == deployed[0]["id"]
    assert effect_statuses(run_id) == {"deploy": "applied"}


def test_deploy_gate_rejection_deploys_nothing(tasks: TaskRecorder) -> None:
    manager = add_actor("rm.ortiz", ["release-manager"])
    run_id = enqueue_run(
        "deploy_gate",
        {"service": "search", "environment": "staging", "version": "2.0.0", "diff": DIFF},
        started_by="dev.kim",
    )
    interrupt = waiting_on(run_id)
    result = submit_resume(contract(interrupt, "rm.ortiz", decision="rejected"), manager)
    assert result.outcome == "accepted", result.reason
    assert finished(run_id) == "succeeded"
    assert get_run(run_id).output["outcome"] == "rejected"
    assert deploy_gate.deployments_of("search", "staging") == []
    assert effect_statuses(run_id) == {}


CUSTOMER = "Order A-1001 arrived with one of the four gate valves cracked. I want a refund."


def _refunds_of(run_id: str) -> list[dict[str, Any]]:
    """The refunds the provider issued for this run's calls."""
    issued = {r["refund_id"] for r in get_run(run_id).output["refunds"]}
    return [r for r in agent.refunds_for("A-1001") if r["id"] in issued]


def test_agent_rejection_goes_back_to_the_model_and_the_edited_call_runs_once(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a finance lead, a support lead, and the scripted model, counted
    fay = add_actor("fay", ["finance-lead"])
    sam = add_actor("sam", ["support-lead"])
    monkeypatch.setenv(agent.MODEL_ENV, "tests.flows.agent_models:counting_model")
    agent_models.calls.clear()
    run_id = enqueue_run("support_agent", {"customer": "C-17", "message": CUSTOMER})

    # When the model proposes refunding the whole order, a finance lead must review it
    first = waiting_on(run_id)
    assert first.review is not None
    assert first.review.tool == "refund"
    assert first.review.args == {"order": "A-1001", "amount": 1240, "reason": "damaged delivery"}
    assert first.roles == ["finance-lead"]
    assert first.evidence["context"] == {"customer": "C-17", "message": CUSTOMER}
    # And she rejects it, saying why
    why = "Only one valve is damaged: refund that one."
    said = contract(first, "fay", decision="rejected", input={"message": why})
    assert submit_resume(said, fay).accepted

    # Then the model hears why and proposes again, within a support lead's authority
    second = waiting_on(run_id)
    assert second.id != first.id and second.review is not None
    assert second.review.args == {"order": "A-1001", "amount": 310, "reason": "one damaged item"}
    assert second.roles == ["support-lead", "finance-lead"]
    # When the support lead raises it beyond her authority, it is denied and recorded
    beyond = {"args": {**second.review.args, "amount": 3100}}
    denied = submit_resume(contract(second, "sam", input=beyond), sam)
    assert denied.outcome == "denied" and "finance-lead" in denied.reason, denied.reason
    # And when she edits it within her authority, the edited call is accepted
    within = {"args": {**second.review.args, "amount": 330}}
    assert submit_resume(contract(second, "sam", input=within), sam).accepted

    # Then exactly the edited call ran, once, and the agent told the customer
    assert finished(run_id) == "succeeded", get_run(run_id).error
    output = get_run(run_id).output
    [refund] = _refunds_of(run_id)
    assert (refund["order_id"], refund["amount"]) == ("A-1001", 330)
    assert "330 EUR" in output["reply"]
    told = [m for m in output["conversation"] if m["role"] == "tool"]
    assert [m["status"] for m in told] == ["rejected", "done"]
    assert told[0]["content"] == why
    assert told[1]["content"]["approved_by"] == "sam" and told[1]["content"]["edited"] is True
    assert effect_statuses(run_id) == {"refund-1": "applied"}
    # And the model was asked once per turn, though the step ran three times
    assert agent_models.calls == [1, 3, 5]
    assert counter(run_id, "claim") == 3


def test_agent_a_call_its_tool_refuses_is_told_to_the_model(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    sam = add_actor("sam", ["support-lead"])
    monkeypatch.setenv(agent.MODEL_ENV, "tests.flows.agent_models:careless_model")
    agent_models.calls.clear()
    run_id = enqueue_run("support_agent", {"customer": "C-17", "message": CUSTOMER})
    # The refused call never reaches a reviewer: the model is told, and proposes again
    asked = waiting_on(run_id)
    assert asked.review is not None and asked.review.args["amount"] == 310
    assert submit_resume(contract(asked, "sam"), sam).accepted
    assert finished(run_id) == "succeeded", get_run(run_id).error
    told = [m for m in get_run(run_id).output["conversation"] if m["role"] == "tool"]
    assert told[0]["status"] == "invalid" and "amount" in told[0]["content"]
    assert [r["amount"] for r in _refunds_of(run_id)] == [310]


def test_agent_a_model_that_cannot_be_loaded_fails_the_run_saying_so(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(agent.MODEL_ENV, "examples.nowhere:model")
    run_id = enqueue_run("support_agent", {"customer": "C-17", "message": CUSTOMER})
    assert finished(run_id) == "failed"
    error = get_run(run_id).error or ""
    assert "AGENT_MODEL='examples.nowhere:model' names no function" in error, error
