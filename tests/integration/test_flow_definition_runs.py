"""Flow definition mistakes a run meets: refused before the run exists, or failing the run for
good at its first attempt with one line, never a run left queued, running or waiting."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel
from sqlalchemy import func, select

from models.db import transaction
from models.errors import FlowDefinitionError
from models.tables import Run
from tests.resumes import contract_for, drain_finished, drain_pending, triggers
from worker import add_actor, enqueue_run, get_run, submit_resume
from worker.flows.flow import Flow
from worker.flows.schemas import input_schema
from worker.testing import TaskRecorder


@input_schema("flowdef-run.v1")
class Go(BaseModel):
    note: str = ""


def _runs() -> int:
    with transaction(readonly=True) as session:
        return int(session.execute(select(func.count()).select_from(Run)).scalar_one())


def test_a_flow_starting_at_a_step_it_lacks_is_refused_before_a_run_exists(
    defining: TaskRecorder,
) -> None:
    # Given a flow whose start= names no step
    flow = Flow("flowdef_bad_start", start="nope")

    @flow.step()
    def first(ctx: Any) -> None:
        return None

    # When application code starts a run of it
    with pytest.raises(FlowDefinitionError) as refused:
        enqueue_run("flowdef_bad_start", {})
    # Then it is refused in one line, and no run waits queued for a step no worker runs
    assert "flow 'flowdef_bad_start' v1 starts at step 'nope', which it does not have" in str(
        refused.value
    )
    assert _runs() == 0
    assert defining.pending == []


@pytest.mark.parametrize(
    ("declaration", "says"),
    [
        ({"evidence": {"doc": "a\x00b"}}, "evidence holds NUL or unpaired surrogate characters"),
        ({"evidence": {"doc\ud800": 1}}, "evidence holds NUL or unpaired surrogate characters"),
        ({"reason": "because\x00"}, "reason must be text without NUL or unpaired surrogate"),
        (
            {"on_expiry": "escalate", "escalate_to": "lead"},
            "escalate_to needs a list of roles, got 'lead'",
        ),
        (
            {"on_expiry": "escalate", "escalate_to": ["lead"], "max_escalations": "two"},
            "max_escalations must be a whole number >= 0, got 'two'",
        ),
        ({"expires_in": "60"}, "expires_in must be seconds (a number or a timedelta)"),
        ({"expires_in": None, "expire_in": 60}, "expires_in= is missing"),
    ],
)
def test_a_flawed_interrupt_fails_the_run_for_good_at_its_first_attempt(
    defining: TaskRecorder, declaration: dict[str, Any], says: str
) -> None:
    # Given a step that declares an interrupt with a mistake in it
    arguments: dict[str, Any] = {
        "kind": "approval",
        "input": Go,
        "authority": ["approver"],
        "expires_in": 3600,
        **declaration,
    }
    arguments = {key: value for key, value in arguments.items() if value is not None}
    flow = Flow("flowdef_flawed_interrupt")

    @flow.step()
    def ask(ctx: Any) -> None:
        ctx.interrupt("gate", **arguments)

    # When a run of it executes
    run_id = enqueue_run("flowdef_flawed_interrupt", {})
    defining.drain()
    # Then the run failed for good, saying what is wrong, without retrying or waiting
    run = get_run(run_id)
    assert run.state == "failed", (run.state, run.error)
    assert run.error is not None
    assert f"FlowDefinitionError: flow definition is invalid: interrupt 'gate': {says}" in (
        run.error
    )
    assert run.pending_interrupts == []
    assert "retry" not in triggers(run_id)


@pytest.mark.parametrize("catches", [False, True], ids=["raised", "caught"])
def test_an_interrupt_asked_twice_in_one_execution_fails_the_run_once_answered(
    defining: TaskRecorder, catches: bool
) -> None:
    # Given a step that asks one approval per item, under one name for all of them
    approver = add_actor("ann", ["approver"])
    flow = Flow("flowdef_asked_twice")

    @flow.step()
    def approve_each(ctx: Any) -> None:
        for item in ("a", "b"):
            try:
                answer = ctx.interrupt(
                    "approve", kind="approval", input=Go, authority=["approver"], expires_in=3600
                )
            except FlowDefinitionError:
                if not catches:
                    raise
                continue  # (the step swallows its own mistake: it fails all the same)
            ctx.state[item] = answer.approved
        return None

    # When the first ask is answered and the step runs again from its beginning
    run_id = enqueue_run("flowdef_asked_twice", {})
    interrupt = drain_pending(run_id, "approve")
    assert submit_resume(contract_for(interrupt, "ann"), approver).accepted
    # Then the first ask gets its answer back, and the second fails the run for good: one
    # answer does not approve every item
    assert drain_finished(run_id) == "failed"
    run = get_run(run_id)
    assert run.error == (
        "FlowDefinitionError: flow definition is invalid: step 'approve_each' asks interrupt "
        "'approve' twice in one execution, and its one answer would answer every ask: give each "
        "ask its own name (e.g. f'approve-{item.id}')"
    )
    assert run.pending_interrupts == [] and "b" not in (run.flow_state or {})
    assert "retry" not in triggers(run_id)
