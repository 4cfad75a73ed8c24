"""The refund flow in a test, with no broker and no worker (docs/tutorial/index.md, step 2)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from examples import payments
from worker import ResumeContract, add_actor, enqueue_run, get_run, submit_resume
from worker.testing import TaskRecorder, recording


@pytest.fixture()
def tasks() -> Iterator[TaskRecorder]:
    with recording() as recorder:  # every publish is recorded, none is sent
        yield recorder


def test_a_refund_waits_for_finance_then_pays_once(tasks: TaskRecorder) -> None:
    customer = f"C-{uuid.uuid4().hex[:6]}"  # a new customer (and responder) at every run
    credential = add_actor(f"ada-{customer}", ["finance"])
    run_id = enqueue_run("refund", {"customer": customer, "amount": 42.5})
    tasks.drain()  # runs the steps until the run waits
    run = get_run(run_id)
    assert run.state == "waiting"
    [interrupt] = run.pending_interrupts
    assert interrupt.evidence == {"amount": 42.5}

    contract = ResumeContract.for_interrupt(
        interrupt, actor=f"ada-{customer}", input={"ticket": "FIN-88"}
    )
    assert submit_resume(contract, credential).accepted
    assert not submit_resume(contract, credential).accepted  # a duplicate changes nothing
    tasks.drain()  # the resume, then the steps after it

    assert get_run(run_id).state == "succeeded"
    assert [refund["amount"] for refund in payments.refunds_for(customer)] == [42.5]
