"""Flow code that is not loaded everywhere: revalidation a gateway could not run is not lost."""

from __future__ import annotations

import pytest
from sqlalchemy import select

from models.db import transaction
from models.tables import Event
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for
from worker import add_actor, enqueue_run, get_run, submit_resume
from worker import flows as registry
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


def test_a_resume_accepted_with_the_flow_code_is_not_revalidated_again(
    tasks: TaskRecorder,
) -> None:
    alice = add_actor("alice", ["approver"])
    # Given a waiting price approval, accepted where the flow's code is loaded
    scratch_redis().set("price:sku-8", "10")
    run_id = enqueue_run("priced", {"sku": "sku-8"})
    tasks.drain()
    asked = get_run(run_id).pending_interrupts[0]
    assert submit_resume(contract_for(asked, "alice", input={"comment": "ok"}), alice).accepted
    # When the price changes after the acceptance
    scratch_redis().set("price:sku-8", "11")
    tasks.drain()
    # Then the accepted answer holds (the gateway revalidated it): the run finishes
    assert get_run(run_id).state == "succeeded"
