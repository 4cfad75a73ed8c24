"""Interrupts inside steps: what is recorded, how answers come back, budgets, operator pauses,
notifications, actors and the read API, with real workers on both databases."""

from __future__ import annotations

import hashlib
import json
import threading
from datetime import timedelta

import pytest
from sqlalchemy import select

from models.db import transaction
from models.errors import (
    ActorError,
    InterruptNotFoundError,
    InvalidInputError,
    InvalidTransitionError,
)
from models.tables import Actor, Event, Run
from tests.flows.interrupts import Receipt, scratch_redis
from tests.resumes import contract_for, drain_finished, drain_pending
from tests.services import wait_for
from worker import (
    add_actor,
    enqueue_run,
    get_interrupt,
    get_run,
    list_actors,
    list_interrupts,
    list_resume_attempts,
    pause_run,
    revoke_actor,
    set_actor_roles,
    submit_resume,
)
from worker.flows.schemas import BudgetGrant, OperatorRelease
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


def _counter(key: str) -> int:
    return int(scratch_redis().get(key) or 0)


@pytest.fixture()
def multi_actors(db: str) -> dict[str, str]:
    return {
        "lee": add_actor("lee", ["legal"]),
        "fin": add_actor("fin", ["finance"]),
        "ops": add_actor("ops", ["ops"]),
    }


def test_interrupt_records_every_field_and_the_worker_lets_go(
    multi_actors: dict[str, str], tasks: TaskRecorder
) -> None:
    # Given a run whose first step asks legal, then finance
    run_id = enqueue_run("multi_gate", {"contract": "c-7"})
    legal = drain_pending(run_id, "legal")
    assert submit_resume(contract_for(legal, "lee"), multi_actors["lee"]).accepted
    # When it stops at the second interrupt of the same step
    finance = drain_pending(run_id, "finance")
    # Then the interrupt records everything a responder and an auditor need
    run = get_run(run_id)
    recorded = get_interrupt(finance.id)
    assert recorded == finance
    evidence = {"po": "PO-7", "lines": {"b": 2, "a": 1}}
    canonical = json.dumps(evidence, sort_keys=True, separators=(",", ":"))
    assert recorded.run_id == run_id
    assert (recorded.name, recorded.kind, recorded.status) == ("finance", "evidence", "pending")
    assert recorded.reason == "attach the invoice"
    assert recorded.step == "review"
    assert recorded.checkpoint_id == run.checkpoint_id == legal.checkpoint_id
    assert recorded.state_version == run.state_version
    assert recorded.flow_version == run.flow_version == 1
    assert (recorded.schema_name, recorded.schema_version) == ("receipt", 2)
    assert recorded.schema_id == "receipt.v2"
    assert recorded.json_schema == Receipt.model_json_schema()
    assert recorded.roles == ["finance"]
    assert recorded.scope == {"contract": "c-7", "team": "ap"}
    assert recorded.evidence == evidence
    assert recorded.evidence_hash == "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    assert recorded.deadline - recorded.created_at == timedelta(seconds=7200)
    assert recorded.on_expiry == "cancel"
    assert recorded.separate_from_starter is False
    assert recorded.supersedes is None and recorded.previous_input is None
    assert recorded.decision is None and recorded.resolved_by is None
    # And the run waits holding no lease: no worker owns it
    assert run.state == "waiting"
    assert run.pending_interrupts == [recorded]
    with transaction(readonly=True) as session:
        row = session.get(Run, run_id)
        assert row is not None
        assert (row.lease_owner, row.lease_expires_at) == (None, None)
        suspends = session.execute(
            select(Event.detail)
            .where(Event.run_id == run_id, Event.trigger == "suspend")
            .order_by(Event.id)
        ).scalars()
        assert [d["interrupt"] for d in suspends] == ["legal", "finance"]


def test_every_task_is_labelled_with_the_flow_and_the_step_it_is_published_for(
    multi_actors: dict[str, str], tasks: TaskRecorder
) -> None:
    # Given a run that waits in its first step, is answered, and finishes
    run_id = enqueue_run("multi_gate", {})
    legal = drain_pending(run_id, "legal")
    assert submit_resume(contract_for(legal, "lee"), multi_actors["lee"]).accepted
    finance = drain_pending(run_id, "finance")
    receipt = {"invoice": "INV-1", "total": 1.0}
    assert submit_resume(contract_for(finance, "fin", input=receipt), multi_actors["fin"]).accepted
    drain_pending(run_id, "shipped")
    # Then the enqueue and each resume were published for the step they execute
    assert [(t.name, t.flow, t.step) for t in tasks.published] == [
        ("interlude.run_step", "multi_gate", "review"),
        ("interlude.resume_run", "multi_gate", "review"),
        ("interlude.resume_run", "multi_gate", "review"),
    ]


def test_answers_come_back_in_order_across_re_executions(
    multi_actors: dict[str, str], tasks: TaskRecorder
) -> None:
    # Given a run with two interrupts in its first step and a third in its second
    run_id = enqueue_run("multi_gate", {})
    legal = drain_pending(run_id, "legal")
    # When each is answered in turn
    comment = {"comment": "clause 2 is fine"}
    assert submit_resume(contract_for(legal, "lee", input=comment), multi_actors["lee"]).accepted
    finance = drain_pending(run_id, "finance")
    receipt = {"invoice": "INV-9", "total": 99.5}
    assert submit_resume(contract_for(finance, "fin", input=receipt), multi_actors["fin"]).accepted
    shipped = drain_pending(run_id, "shipped")
    reject = contract_for(shipped, "ops", decision="rejected", input={"tracking": "none"})
    assert submit_resume(reject, multi_actors["ops"]).accepted
    # Then the step re-executed from its beginning each time and got every answer by name
    assert drain_finished(run_id) == "succeeded"
    assert _counter(f"multi:review:{run_id}") == 3
    assert get_run(run_id).output == {
        "legal": ["approved", "lee", {"comment": "clause 2 is fine", "amount_limit": None}],
        "finance": ["approved", "fin", receipt],
        # A rejection is the step's to interpret; the input that came with it is validated
        "shipped": False,
        "tracking": "none",
    }
    interrupts = list_interrupts(run_id=run_id)
    assert [(i.name, i.status, i.resolved_by) for i in interrupts] == [
        ("legal", "resolved", "lee"),
        ("finance", "resolved", "fin"),
        ("shipped", "resolved", "ops"),
    ]
    assert interrupts[0].checkpoint_id == interrupts[1].checkpoint_id
    assert interrupts[2].checkpoint_id != interrupts[1].checkpoint_id
    assert interrupts[2].decision == "rejected"


def test_budget_interrupt_is_granted_through_the_gateway(db: str, tasks: TaskRecorder) -> None:
    operator = add_actor("ops", ["operator"])
    approver = add_actor("alice", ["approver"])
    # Given a run with an allowance of 10 whose step spends 4 + 4 + 4
    run_id = enqueue_run("metered", {"costs": [4, 4, 4]})
    # Then it stops with a budget interrupt when the third spend would exceed it
    budget = drain_pending(run_id)
    assert (budget.kind, budget.name, budget.schema_id) == ("budget", "budget.1", "budget.v1")
    assert budget.evidence == {"allowance": 10, "consumed": 8, "requested": 4}
    assert budget.roles == ["operator"]
    # When an approver (not an operator) tries to grant more, Then it is denied
    denied = submit_resume(contract_for(budget, "alice", input={"units": 5}), approver)
    assert denied.outcome == "denied"
    # When units are not a number (JSON text or a boolean), Then the grant is invalid input
    for units in ("5", True):
        typed = submit_resume(contract_for(budget, "ops", input={"units": units}), operator)
        assert typed.outcome == "invalid_input"
        assert "units" in typed.reason, typed.reason
    # When too small a grant is accepted, Then the same step asks again at the same checkpoint
    assert submit_resume(contract_for(budget, "ops", input={"units": 1}), operator).accepted
    again = drain_pending(run_id, "budget.2")
    assert again.checkpoint_id == budget.checkpoint_id
    assert again.evidence == {"allowance": 11, "consumed": 8, "requested": 4}
    # When enough is granted, Then the run finishes having spent 12 of 16
    grant = BudgetGrant(units=5, note="one more").model_dump()
    assert submit_resume(contract_for(again, "ops", input=grant), operator).accepted
    assert drain_finished(run_id) == "succeeded"
    run = get_run(run_id)
    assert (run.budget_allowance, run.budget_consumed) == (16, 12)
    assert run.output == {"consumed": 12}
    assert _counter(f"metered:spend:{run_id}") == 3
    assert _counter(f"metered:after:{run_id}") == 1


def test_a_refused_budget_grant_fails_the_run(db: str, tasks: TaskRecorder) -> None:
    operator = add_actor("ops", ["operator"])
    run_id = enqueue_run("metered", {"costs": [11]})
    budget = drain_pending(run_id)
    assert submit_resume(contract_for(budget, "ops", decision="rejected"), operator).accepted
    assert drain_finished(run_id) == "failed"
    assert "budget exhausted" in (get_run(run_id).error or "")
    assert _counter(f"metered:after:{run_id}") == 0


def test_operator_pause_stops_at_the_next_step_boundary(db: str, tasks: TaskRecorder) -> None:
    operator = add_actor("ops", ["operator"])
    approver = add_actor("alice", ["approver"])
    redis = scratch_redis()
    # Given a run busy in its first step (executing in another thread)
    run_id = enqueue_run("pausable", {})
    executing = threading.Thread(target=tasks.drain, name="drain")
    executing.start()
    try:
        wait_for(lambda: redis.get(f"pausable:holding:{run_id}"))
        # When an operator asks it to pause, and the step then ends
        assert pause_run(run_id, actor="ops", credential=operator) == "human:ops"
    finally:
        redis.set(f"pausable:go:{run_id}", 1)
        executing.join()
    # Then it waits on an operator interrupt instead of running the next step
    paused = drain_pending(run_id)
    assert (paused.kind, paused.name, paused.schema_id) == (
        "operator",
        "operator.pause",
        "operator.v1",
    )
    assert paused.evidence == {"requested_by": "human:ops", "step": "after_hold"}
    assert paused.reason == "paused by human:ops"
    assert paused.roles == ["operator"]
    run = get_run(run_id)
    assert (run.next_step, run.pause_requested_by) == ("after_hold", "human:ops")
    assert _counter(f"pausable:after:{run_id}") == 0
    # And only an operator may release it, through the same gateway as any approval
    assert submit_resume(contract_for(paused, "alice"), approver).outcome == "denied"
    release = OperatorRelease(note="carry on").model_dump()
    assert submit_resume(contract_for(paused, "ops", input=release), operator).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).pause_requested_by is None
    assert _counter(f"pausable:after:{run_id}") == 1


def test_pause_needs_an_actor_and_a_live_run(db: str, tasks: TaskRecorder) -> None:
    operator = add_actor("ops", ["operator"])
    run_id = enqueue_run("quick", {})
    with pytest.raises(InvalidInputError, match="actor"):
        pause_run(run_id, actor="", credential=operator)
    assert drain_finished(run_id) == "succeeded"
    with pytest.raises(InvalidTransitionError, match="cannot pause from succeeded"):
        pause_run(run_id, actor="ops", credential=operator)


def test_the_notifier_sees_the_committed_interrupt(db: str, tasks: TaskRecorder) -> None:
    redis = scratch_redis()
    redis.set("price:sku-1", "3")
    run_id = enqueue_run("priced", {"sku": "sku-1"})
    assert redis.lrange(f"notified:{run_id}", 0, -1) == []
    interrupt = drain_pending(run_id)
    notes = [json.loads(n) for n in redis.lrange(f"notified:{run_id}", 0, -1)]
    # Called once, by its notify task (published by the step's execution, not at enqueue),
    # after the commit: a fresh transaction already found it. (That a worker process calls
    # it: tests/acceptance.)
    assert notes == [
        {
            "id": interrupt.id,
            "name": "approve",
            "visible": "pending",
            "pid": notes[0]["pid"],
            "previous_input": None,
        }
    ]
    assert [t.notice.notifier for t in tasks.published if t.notice is not None] == [
        "record_notification",
        "failing_notifier",
    ]


def test_actor_credential_is_shown_once_and_stored_hashed(db: str) -> None:
    # When an actor is added
    credential = add_actor("alice", ["approver", "legal", "approver"])
    # Then the credential is returned, and only its hash is stored
    assert credential.startswith("ilc_") and len(credential) > 40
    with transaction(readonly=True) as session:
        row = session.get(Actor, "alice")
        assert row is not None
        stored = row.credential_hash
    assert credential not in stored
    assert stored == "sha256$" + hashlib.sha256(credential.encode()).hexdigest()
    (view,) = list_actors()
    assert (view.id, view.roles, view.revoked_at) == ("alice", ["approver", "legal"], None)
    assert credential not in view.model_dump_json()
    # And a second actor gets a different credential
    assert add_actor("bob", ["approver"]) != credential


@pytest.mark.parametrize(
    ("actor_id", "roles", "message"),
    [
        ("bad id!", ["approver"], "id may only hold"),
        ("ali\nce", ["approver"], "id may only hold"),
        ("carol", "approver", "list of strings"),
        ("carol", [], "at least one role"),
        ("carol", ["  "], "at least one role"),
        ("carol", ["a role"], "not a valid name"),
    ],
)
def test_bad_actor_definitions_write_nothing(
    db: str, actor_id: str, roles: list[str], message: str
) -> None:
    with pytest.raises(ActorError, match=message):
        add_actor(actor_id, roles)
    assert list_actors() == []


def test_actors_can_be_revoked_and_their_roles_changed(db: str) -> None:
    add_actor("alice", ["approver"])
    with pytest.raises(ActorError, match="already exists"):
        add_actor("alice", ["legal"])
    set_actor_roles("alice", ["legal", "ops"])
    assert list_actors()[0].roles == ["legal", "ops"]
    revoke_actor("alice")
    revoked = list_actors()[0].revoked_at
    assert revoked is not None
    revoke_actor("alice")  # revoking twice keeps the first time
    assert list_actors()[0].revoked_at == revoked
    with pytest.raises(ActorError, match="no such actor"):
        revoke_actor("nobody")
    with pytest.raises(ActorError, match="no such actor"):
        set_actor_roles("nobody", ["x"])


def test_read_api_filters_and_errors(multi_actors: dict[str, str], tasks: TaskRecorder) -> None:
    first = enqueue_run("multi_gate", {})
    second = enqueue_run("approval", {})
    legal = drain_pending(first, "legal")
    approve = drain_pending(second)
    submit_resume(contract_for(legal, "lee"), multi_actors["lee"])
    submit_resume(contract_for(legal, "lee"), "ilc_wrong")
    drain_pending(first, "finance")
    # Filters combine; the oldest comes first
    assert [i.name for i in list_interrupts(run_id=first)] == ["legal", "finance"]
    assert [i.id for i in list_interrupts(kind="approval", status="pending")] == [approve.id]
    assert [i.name for i in list_interrupts(status="resolved")] == ["legal"]
    assert [i.name for i in list_interrupts(kind="evidence")] == ["finance"]
    with pytest.raises(InvalidInputError, match="unknown status 'done'"):
        list_interrupts(status="done")
    with pytest.raises(InvalidInputError, match="unknown kind 'chat'"):
        list_interrupts(kind="chat")
    with pytest.raises(InterruptNotFoundError, match="no interrupt nope"):
        get_interrupt("nope")
    # Every attempt is listed, by interrupt or by run
    attempts = list_resume_attempts(interrupt_id=legal.id)
    assert [a.outcome for a in attempts] == ["unauthenticated", "accepted"]  # newest first
    assert [a.id for a in list_resume_attempts(run_id=first)] == [a.id for a in attempts]
    assert list_resume_attempts(run_id=second) == []
    assert attempts[-1].actor_id == "lee"
    assert attempts[-1].payload["interrupt_id"] == legal.id


@pytest.mark.parametrize("then", ["return", "finally"])
def test_a_step_that_catches_its_wait_and_returns_fails_instead_of_going_on(
    db: str, tasks: TaskRecorder, then: str
) -> None:
    # Given a step that asks for approval inside a bare except (or returns in finally)
    run_id = enqueue_run("swallowing", {"then": then})
    # When it runs, it fails for good, saying what it did, and nothing waits or is paid
    assert drain_finished(run_id) == "failed"
    run = get_run(run_id)
    assert "caught the signal of its wait for 'go'" in (run.error or ""), run.error
    assert run.pending_interrupts == [] and "paid" not in (run.flow_state or {})
    assert list_interrupts(run_id=run_id) == []


def test_an_effect_after_a_caught_wait_waits_for_the_answer_then_happens_once(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a step that catches its wait's signal and goes on to pay
    approver = add_actor("ann", ["approver"])
    run_id = enqueue_run("swallowing", {"then": "pay"})
    # When it runs: the payment raises the wait again, so the run waits and nothing is paid
    interrupt = drain_pending(run_id, "go")
    key_prefix = f"swallowing:paid:{run_id}"
    assert [k for k in scratch_redis().keys(key_prefix + "*")] == []
    # Then once approved it pays, once
    assert submit_resume(contract_for(interrupt, "ann"), approver).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).flow_state["paid"] is True
    assert len(scratch_redis().keys(key_prefix + "*")) == 1


def test_a_failing_notifier_is_one_line_naming_it_and_the_interrupt(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    redis = scratch_redis()
    redis.set("price:sku-2", "3")
    run_id = enqueue_run("priced", {"sku": "sku-2"})
    redis.set(f"notifier-fails:{run_id}", "1")
    with caplog.at_level("DEBUG", logger="worker.ops.notifications"):
        interrupt = drain_pending(run_id)
    # The run waits, the other notifier was called once, and the failure, once its retries
    # (INTERLUDE_NOTIFY_RETRIES, 5) are spent, is one warning line
    assert len(redis.lrange(f"notified:{run_id}", 0, -1)) == 1
    [warning] = [r for r in caplog.records if r.levelname == "WARNING"]
    assert warning.getMessage() == (
        f"interrupt notifier failing_notifier failed for interrupt {interrupt.id} (attempt 6, "
        "the last): RuntimeError: webhook said 500\\nsecond line"
    )
    assert warning.exc_info is None
    # (each attempt's traceback is there at debug level, chained to nothing of the step's)
    debugs = [r for r in caplog.records if r.levelname == "DEBUG" and r.exc_info]
    assert len(debugs) == 6
    assert all(r.exc_info is not None and r.exc_info[1].__context__ is None for r in debugs)
