"""Flow code that is not loaded everywhere: revalidation a gateway could not run is not lost."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.db import transaction
from models.tables import Event
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for
from worker import add_actor, enqueue_run, get_run, list_runs, submit_resume
from worker.flows import flow as registry
from worker.flows.versions import FlowVersion, flow_versions
from worker.testing import TaskRecorder


def test_a_resume_accepted_without_the_flow_code_is_revalidated_by_the_worker(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    alice = add_actor("alice", ["approver"])
    # Given a run waiting on a price approval raised at price 10
    scratch_redis().set("price:sku-7", "10")
    run_id = enqueue_run("priced", {"sku": "sku-7"})
    tasks.drain()
    asked = get_run(run_id).pending_interrupts[0]
    # When the price changes and a process without the flow's code accepts the approval
    scratch_redis().set("price:sku-7", "12")
    with monkeypatch.context() as without_code:
        without_code.setattr(
            registry, "_flows", {k: f for k, f in registry._flows.items() if k[0] != "priced"}
        )
        result = submit_resume(contract_for(asked, "alice", input={"comment": "ok"}), alice)
    assert result.accepted, result.reason
    # Then the worker that continues the run revalidates: it waits on a renewed review with
    # the current evidence, on a new checkpoint, the old answer kept
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "waiting"
    renewed = run.pending_interrupts[0]
    assert renewed.evidence == {"sku": "sku-7", "price": "12"}
    assert renewed.previous_input == {"comment": "ok", "amount_limit": None}
    assert (renewed.supersedes, renewed.checkpoint_id) == (asked.id, run.checkpoint_id)
    assert renewed.checkpoint_id != asked.checkpoint_id
    with transaction(readonly=True) as session:
        triggers = list(
            session.execute(
                select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id)
            ).scalars()
        )
    # (claimed, then waiting again before the step ran)
    assert triggers[-2:] == ["suspend", "review_renewed"]
    assert "claim" in triggers[triggers.index("accept_resume") :]
    # And once the new price is approved, the run finishes with it
    assert submit_resume(contract_for(renewed, "alice", input={"comment": "12 ok"}), alice).accepted
    tasks.drain()
    assert get_run(run_id).output == {"price": "12", "comment": "12 ok"}


def test_a_change_after_the_acceptance_is_a_renewed_review_where_the_step_acts(
    tasks: TaskRecorder,
) -> None:
    alice = add_actor("alice", ["approver"])
    # Given a waiting price approval at 10, accepted where the flow's code is loaded
    scratch_redis().set("price:sku-8", "10")
    run_id = enqueue_run("priced", {"sku": "sku-8"})
    tasks.drain()
    asked = get_run(run_id).pending_interrupts[0]
    assert submit_resume(contract_for(asked, "alice", input={"comment": "ok"}), alice).accepted
    # When the price changes after the acceptance, before the step acts
    scratch_redis().set("price:sku-8", "11")
    tasks.drain()
    # Then the step, asking again with price 11, is not handed the approval of price 10:
    # a renewed review at the same checkpoint, the input kept
    run = get_run(run_id)
    assert run.state == "waiting"
    renewed = run.pending_interrupts[0]
    assert renewed.evidence == {"sku": "sku-8", "price": "11"}
    assert (renewed.supersedes, renewed.checkpoint_id) == (asked.id, asked.checkpoint_id)
    assert renewed.previous_input == {"comment": "ok", "amount_limit": None}
    # And once price 11 is approved, the run finishes with it
    assert submit_resume(contract_for(renewed, "alice", input={"comment": "11 ok"}), alice).accepted
    tasks.drain()
    assert get_run(run_id).output == {"price": "11", "comment": "11 ok"}


def test_flows_check_finds_runs_that_the_loaded_code_would_refuse(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given runs waiting at the step "gate" of approval version 1
    for amount in (1, 2):
        enqueue_run("approval", {"env": "prod", "diff": f"d-{amount}"})
    tasks.drain()
    approval = registry._flows[("approval", 1)]

    # When version 1 is deployed again with its steps renamed (and no new version)
    with monkeypatch.context() as renamed:
        renamed.setattr(approval, "steps", {n: s for n, s in approval.steps.items() if n != "gate"})
        found = _version("approval", 1)
    # Then the check names the step its runs are at, which that code lacks
    assert found.blocked and not found.stranded
    assert found.problems == (
        "2 unfinished run(s) are at step 'gate', which version 1 does not have",
    )

    # When version 2 replaces it, declaring a migration that fails on their state
    with monkeypatch.context() as deployed:
        deployed.setattr(
            registry, "_flows", {k: f for k, f in registry._flows.items() if k[0] != "approval"}
        )
        newer = registry.Flow("approval", version=2)
        newer.step("gate")(lambda ctx: None)

        @newer.migrates_from(1)
        def _from_v1(state: dict[str, object]) -> dict[str, object]:
            return {"cents": state["amount"]}

        found = _version("approval", 1)
    # Then the check runs the migration on a copy of each run's state and says what failed
    assert found.blocked and found.migrates_to == 2
    [problem] = found.problems
    assert problem.startswith("the migration fails for 2 unfinished run(s); the first: ")
    assert "from version 1 to 2 failed: KeyError: 'amount'" in problem
    # And nothing about the runs changed
    assert {get_run(r.id).flow_version for r in list_runs(flow="approval")} == {1}


def _version(flow: str, version: int) -> FlowVersion:
    [found] = [v for v in flow_versions() if (v.flow, v.version) == (flow, version)]
    return found
