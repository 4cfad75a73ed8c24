"""A flow author's mistakes with ``ctx.effect`` fail the step for good, saying what was wrong.

A key used again with other arguments (or by another effect) never hands back another call's
receipt; a receipt the ledger cannot keep leaves the effect's outcome unknown (the reconciler
or an operator's repair gives the receipt), never applied without one; a name or key that the
ledger cannot store is refused before anything is written. Flows: tests/flows/effect_misuse.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from tests.flows.effects import calls, outside
from tests.resumes import triggers
from worker import (
    ResumeContract,
    add_actor,
    enqueue_run,
    get_run,
    list_interrupts,
    submit_resume,
)
from worker.cli import main
from worker.operate import retry_run
from worker.runs import list_effects
from worker.testing import TaskRecorder


def _answer(run_id: str, credential: str, actor: str, input: Any) -> None:
    [interrupt] = list_interrupts(run_id=run_id, status="pending")
    contract = ResumeContract.for_interrupt(
        interrupt, actor=actor, decision="approved", input=input, expires_in=timedelta(hours=1)
    )
    assert submit_resume(contract, credential).accepted


def _failed_for_good(run_id: str) -> str:
    """The run's error, once it failed at its first attempt (no retry: a programming error)."""
    run = get_run(run_id)
    assert run.state == "failed", (run.state, run.error)
    assert "retry" not in triggers(run_id)
    assert run.error is not None and "\n" not in run.error
    return run.error


def _shows(run_id: str, capsys: pytest.CaptureFixture[str]) -> str:
    """``interlude runs show`` works for the run (and prints its effects)."""
    capsys.readouterr()
    assert main(["runs", "show", run_id, "--wide"]) == 0, capsys.readouterr().err
    return capsys.readouterr().out


# --- S4: a key used again ----------------------------------------------------------------------


def test_same_arguments_after_a_trip_through_the_database_reuse_the_receipt_other_ones_fail(
    tasks: TaskRecorder, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    approver = add_actor("approver-1", ["approver"])
    run_id = enqueue_run("effect_called_again", {})
    tasks.drain()
    assert get_run(run_id).state == "waiting"
    [effect] = list_effects(run_id)
    first_receipt = effect.receipt
    # When the step runs again on resume with the same arguments, read back from the database
    _answer(run_id, approver, "approver-1", {"go": True})
    tasks.drain()
    # Then they are the same call: its receipt, fn not called again, the run waits again
    run = get_run(run_id)
    assert run.state == "waiting", run.error
    assert calls(run_id) == 1
    seen = [t.decode() for t in outside().lrange(f"seen:{run_id}", 0, -1) if isinstance(t, bytes)]
    if backend == "postgresql":
        # (PostgreSQL gave the float back as an integer: the same number all the same.)
        assert seen == ["float", "int"]
    # When it runs again with another argument under the same (default) key
    outside().set(f"note:{run_id}", "changed")
    _answer(run_id, approver, "approver-1", {"go": True})
    tasks.drain()
    # Then the step fails for good naming the effect, instead of taking the other call's receipt
    error = _failed_for_good(run_id)
    assert error.startswith(f"EffectError: effect 'charge' of run {run_id}: called again with")
    assert "other arguments" in error
    assert calls(run_id) == 1
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt) == ("applied", first_receipt)
    assert "called again with other arguments" in _shows(run_id, capsys)


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("other_args", "called again with other arguments"),
        ("other_effect", "belongs to effect 'reserve'"),
    ],
)
def test_a_caller_key_used_again_for_another_call_fails_the_step(
    tasks: TaskRecorder, mode: str, expected: str
) -> None:
    # Given a key that a step used for one call: used again for the same call, it is that call
    same = enqueue_run("effect_key_shared", {"mode": "same"})
    tasks.drain()
    run = get_run(same)
    assert run.state == "succeeded", run.error
    assert run.output["second"] == run.output["first"]
    assert calls(same) == 1
    # When it is used for another call: with other arguments, or by another effect
    run_id = enqueue_run("effect_key_shared", {"mode": mode})
    tasks.drain()
    # Then the step fails for good, rather than taking the first call's receipt
    error = _failed_for_good(run_id)
    assert expected in error
    assert calls(run_id) == 1
    [effect] = list_effects(run_id)
    assert (effect.name, effect.status) == ("reserve", "applied")


# --- S5 and L2: a receipt the ledger cannot keep ---------------------------------------------

BAD_RECEIPTS = [
    ("datetime", "the receipt is not JSON: datetime"),
    ("set", "the receipt is not JSON: set"),
    ("nul", "the receipt holds NUL or unpaired surrogate characters at 'order'"),
    ("nul_key", "the receipt holds NUL or unpaired surrogate characters at 'PO\\x00'"),
    ("surrogate", "the receipt holds NUL or unpaired surrogate characters at '[0]'"),
]


def _check_unknown(run_id: str, expected: str) -> None:
    error = _failed_for_good(run_id)
    assert error == f"EffectError: effect 'order' of run {run_id}: {expected}"
    assert calls(run_id) == 1
    # The effect happened, but its outcome is left unknown (saying why), not applied with None
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt) == ("intent", None)
    assert effect.error == error.removeprefix("EffectError: ")


@pytest.mark.parametrize(("mode", "expected"), BAD_RECEIPTS)
def test_a_lost_receipt_is_found_again_by_the_reconciler_when_the_run_is_retried(
    tasks: TaskRecorder, mode: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    operator = add_actor("operator-1", ["operator"])
    run_id = enqueue_run("effect_lost_receipt", {"mode": mode, "reconciler": True})
    tasks.drain()
    _check_unknown(run_id, expected)
    _shows(run_id, capsys)
    # When an operator retries the run
    retry_run(run_id, actor="operator-1", credential=operator, reason="receipt type fixed")
    tasks.drain()
    # Then the reconciler's receipt (what the outside world kept) is the step's: fn not called
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    key = f"{run_id}:0:order:order"
    expected_receipt = {"args": [mode], "key": key}
    assert run.output["receipt"] == expected_receipt
    assert calls(run_id) == 1
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt) == ("applied", expected_receipt)


def test_a_lost_receipt_found_again_is_not_given_to_a_call_with_other_arguments(
    tasks: TaskRecorder,
) -> None:
    operator = add_actor("operator-1", ["operator"])
    run_id = enqueue_run("effect_lost_receipt", {"mode": "datetime", "reconciler": True})
    tasks.drain()
    _check_unknown(run_id, "the receipt is not JSON: datetime")
    # When the run is retried and the step calls the effect with another argument
    outside().set(f"note:{run_id}", "changed")
    retry_run(run_id, actor="operator-1", credential=operator, reason="receipt type fixed")
    tasks.drain()
    # Then the reconciler's finding is recorded (the first call did happen), and the step
    # fails for good rather than taking that call's receipt as its own
    error = _failed_for_good(run_id)
    assert "called again with other arguments" in error
    key = f"{run_id}:0:order:order"
    [effect] = list_effects(run_id)
    assert (effect.status, effect.receipt) == ("applied", {"args": ["datetime"], "key": key})
    assert calls(run_id) == 1


@pytest.mark.parametrize(("mode", "expected"), BAD_RECEIPTS[::2])
def test_a_lost_receipt_without_a_reconciler_is_asked_of_an_operator(
    tasks: TaskRecorder, mode: str, expected: str
) -> None:
    operator = add_actor("operator-1", ["operator"])
    run_id = enqueue_run("effect_lost_receipt", {"mode": mode})
    tasks.drain()
    _check_unknown(run_id, expected)
    retry_run(run_id, actor="operator-1", credential=operator, reason="receipt type fixed")
    tasks.drain()
    # Then the run waits on a repair for the effect, rather than going on with receipt None
    run = get_run(run_id)
    assert run.state == "waiting", run.error
    [repair] = list_interrupts(run_id=run_id, status="pending")
    assert (repair.kind, repair.name) == ("repair", "repair:order")
    finding = {"outcome": "applied", "receipt": {"order": "PO-1"}}
    _answer(run_id, operator, "operator-1", finding)
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output["receipt"] == {"order": "PO-1"}
    assert calls(run_id) == 1


# --- U1 and L2: names and keys the ledger cannot store ------------------------------------


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        ("name_int", "was given a name of type int: an effect's name is a non-empty str"),
        ("name_empty", "was given an empty name: an effect's name is a non-empty str"),
        ("name_nul", "effect 'pa\\x00y' of run {run_id}: the name holds NUL or unpaired"),
        ("name_surrogate", "effect 'pay\\ud800' of run {run_id}: the name holds NUL or"),
        ("name_long", "the name is 201 characters long, more than 200"),
        ("key_int", "effect 'pay' of run {run_id}: key= is of type int: an idempotency key"),
        ("key_empty", "effect 'pay' of run {run_id}: key= is empty: an idempotency key"),
        ("key_nul", "effect 'pay' of run {run_id}: the idempotency key holds NUL or unpaired"),
        ("key_surrogate", "the idempotency key holds NUL or unpaired surrogate characters"),
        ("key_long", "the idempotency key is 401 characters long, more than 400"),
    ],
)
def test_a_name_or_key_the_ledger_cannot_store_fails_the_step_before_anything_is_written(
    tasks: TaskRecorder, case: str, expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = enqueue_run("effect_bad_ids", {"case": case})
    tasks.drain()
    error = _failed_for_good(run_id)
    assert error.startswith("EffectError: ")
    assert expected.format(run_id=run_id) in error
    assert calls(run_id) == 0
    assert list_effects(run_id) == []
    # And the run can be looked at
    assert run_id in _shows(run_id, capsys)


def test_a_call_failing_with_text_no_database_stores_is_recorded_failed(
    tasks: TaskRecorder,
) -> None:
    run_id = enqueue_run("effect_refused_oddly", {})
    tasks.drain()
    # The effect's error is kept as the run's is: what no database stores written as escapes
    escaped = "ValueError: card\\u0000declined \\ud800"
    run = get_run(run_id)
    assert (run.state, run.error) == ("failed", escaped)
    [effect] = list_effects(run_id)
    assert (effect.status, effect.error) == ("failed", escaped)
    assert calls(run_id) == 1
