"""With a real worker on each database: a resumed step that proposes something else does not
execute it, and a remembered proposal is executed as approved."""

from __future__ import annotations

from tests.flows import agents
from tests.resumes import contract_for, wait_finished, wait_pending
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, submit_resume


def test_a_changed_proposal_waits_for_a_renewed_review_with_a_real_worker(
    db: str, shared_worker: WorkerProcess
) -> None:
    manager = add_actor("mia", ["manager"])
    # Given a run whose model proposes again at every execution, waiting on the manager
    run_id = enqueue_run("agent_refunds", {"mode": "changing"})
    shown = wait_pending(run_id, "review_call")
    # When the manager approves the proposal shown
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    # Then the worker, executing the step again, asks about the new proposal instead
    renewed = wait_for(
        lambda: next(
            (i for i in get_run(run_id).pending_interrupts if i.supersedes == shown.id), None
        ),
        timeout=30,
    )
    assert renewed.evidence == {"call": {"order": "A-1", "amount": 20}}
    assert agents.executed(run_id) == []


def test_a_remembered_proposal_is_executed_as_approved_with_a_real_worker(
    db: str, shared_worker: WorkerProcess
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_refunds", {"mode": "remembered"})
    shown = wait_pending(run_id, "review_call")
    assert submit_resume(contract_for(shown, "mia"), manager).accepted
    assert wait_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "A-1", "amount": 10}]
    assert agents.proposals(run_id) == 1
