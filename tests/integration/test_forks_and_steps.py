"""A run's steps (timing and output), its result, and forks from a step, on both databases."""

from __future__ import annotations

import pytest

from models.errors import InvalidInputError, OperatorDeniedError
from tests.flows.history import shipments
from tests.resumes import drain_finished
from worker import add_actor, enqueue_run, fork_run, get_run, list_steps
from worker.runs import list_events
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


def _shipped(tasks: TaskRecorder, order: str) -> str:
    run_id = enqueue_run("shipping", {"order": order, "items": 3})
    assert drain_finished(run_id) == "succeeded"
    return run_id


def test_each_step_keeps_its_timing_and_output(db: str, tasks: TaskRecorder) -> None:
    run_id = _shipped(tasks, "o-1")
    steps = list_steps(run_id)
    assert [(s.seq, s.step, s.next_step) for s in steps] == [
        (1, "pack", "send"),
        (2, "send", "close"),
        (3, "close", None),
    ]
    assert steps[0].output == {"set": {"packed": 3}, "removed": []}
    assert steps[1].output["set"]["receipt"] == {"shipment": "S-o-1-1"}
    assert steps[1].effects == [f"{run_id}:1:send:ship"]
    assert all(s.duration_ms is not None and s.duration_ms >= 0 for s in steps)


def test_a_fork_reruns_from_a_step_without_repeating_applied_effects(
    db: str, tasks: TaskRecorder
) -> None:
    ops = add_actor("ops", ["operator"])
    run_id = _shipped(tasks, "o-2")
    assert shipments("o-2") == 1
    # When an operator forks the run from its "send" step
    fork_id = fork_run(run_id, from_step="send", actor="ops", credential=ops)
    # Then the fork runs send and close again, finding the shipment's receipt: no second one
    assert drain_finished(fork_id) == "succeeded"
    assert shipments("o-2") == 1
    fork = get_run(fork_id)
    assert fork.output == get_run(run_id).output
    assert (fork.forked_from, fork.forked_at) == (run_id, 1)
    assert [s.step for s in list_steps(fork_id)] == ["send", "close"]
    # And the origin links to its fork, with a recorded event
    assert get_run(run_id).forks == [fork_id]
    [forked] = [e for e in list_events(run_id) if e.trigger == "forked"]
    assert forked.detail["to"] == fork_id and forked.actor == "human:ops"


def test_a_fork_repeats_effects_only_when_asked(db: str, tasks: TaskRecorder) -> None:
    ops = add_actor("ops", ["operator"])
    run_id = _shipped(tasks, "o-3")
    fork_id = fork_run(run_id, from_step="send", actor="ops", credential=ops, repeat_effects=True)
    assert drain_finished(fork_id) == "succeeded"
    assert shipments("o-3") == 2


def test_forks_are_an_operators_action(db: str, tasks: TaskRecorder) -> None:
    clerk = add_actor("clerk", ["sales"])
    ops = add_actor("ops", ["operator"])
    run_id = _shipped(tasks, "o-4")
    with pytest.raises(OperatorDeniedError):
        fork_run(run_id, from_step="send", actor="clerk", credential=clerk)
    assert "operator_refused" in [e.trigger for e in list_events(run_id)]
    with pytest.raises(InvalidInputError, match="never reached step 'ship_twice'"):
        fork_run(run_id, from_step="ship_twice", actor="ops", credential=ops)
    assert get_run(run_id).forks == []
