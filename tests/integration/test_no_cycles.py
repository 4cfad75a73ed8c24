"""A step that waits leaves no reference cycle behind: what it made is freed as it ends, not
by the garbage collector, whose collections a worker would otherwise pay for at every
suspended step (0.085 ms of its CPU a W1 run, docs/explanation/performance.md)."""

from __future__ import annotations

import gc

from worker import enqueue_run, get_run
from worker.testing import TaskRecorder

# interlude's objects of a step: none may be left in a cycle once the step has ended.
OURS = {"Suspend", "StepContext", "Claimed", "Ended", "InterruptDecl"}


def test_a_suspended_step_leaves_nothing_for_the_garbage_collector(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a flow whose step waits for an approval, run once (imports, caches, statements)
    enqueue_run("multi_gate", {})
    tasks.drain()
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)  # (what a collection finds unreachable is kept to be read)
    try:
        # When another run's step suspends
        run_id = enqueue_run("multi_gate", {})
        tasks.drain()
        assert get_run(run_id).state == "waiting"
        gc.collect()
        # Then nothing of the step was left in a cycle, its frames and signal included
        left = {type(found).__qualname__ for found in gc.garbage}
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert not left & OURS, sorted(left)
    assert "frame" not in left, sorted(left)
