"""The lifecycle table, the shared status vocabulary and error messages (no services)."""

from __future__ import annotations

import pytest

from models.enums import (
    TERMINAL_STATES,
    EventKind,
    InterruptStatus,
    RunState,
)
from models.errors import InvalidTransitionError, StaleStateError
from models.runs import run_destination
from statemachine import (
    TransitionNotAllowed,
    destination,
    interrupt_destination,
    interrupt_table,
    sources,
    transition_table,
    triggers,
)


def test_every_documented_move_exists() -> None:
    expected = {
        ("claim", "queued"): "running",
        ("claim", "resuming"): "running",
        ("advance", "running"): "queued",
        ("requeue", "running"): "queued",
        ("suspend", "running"): "waiting",
        ("accept_resume", "waiting"): "resuming",
        ("expire", "waiting"): "expired",
        ("complete", "running"): "succeeded",
        ("fail", "running"): "failed",
    }
    table = transition_table()
    for move, dest in expected.items():
        assert table[move] == dest


def test_terminal_states_have_no_way_out_but_an_operators_retry_of_a_failure() -> None:
    for trigger, source in transition_table():
        if (trigger, source) == ("restart", "failed"):
            continue  # `interlude runs retry`: a failed run continues from its checkpoint
        assert RunState(source) not in TERMINAL_STATES
    assert destination("restart", "failed") is RunState.QUEUED
    for other in TERMINAL_STATES - {RunState.FAILED}:
        with pytest.raises(TransitionNotAllowed):
            destination("restart", other.value)


def test_cancel_leaves_every_non_terminal_state() -> None:
    assert sources("cancel") == frozenset(set(RunState) - TERMINAL_STATES)


def test_invalid_trigger_is_a_one_line_error_naming_run_and_state() -> None:
    with pytest.raises(TransitionNotAllowed):
        destination("claim", "waiting")
    with pytest.raises(InvalidTransitionError) as caught:
        run_destination("claim", "waiting", "r-1")
    assert str(caught.value) == "run r-1: cannot claim from waiting"
    assert caught.value.run_id == "r-1"
    with pytest.raises(InvalidTransitionError):
        run_destination("no_such_trigger", "queued", "r-1")


def test_a_pending_interrupt_ends_once_one_of_four_ways() -> None:
    assert dict(interrupt_table()) == {
        ("resolve", "pending"): "resolved",
        ("expire", "pending"): "expired",
        ("supersede", "pending"): "superseded",
        ("cancel", "pending"): "cancelled",
    }
    for ended in set(InterruptStatus) - {InterruptStatus.PENDING}:
        for trigger in ("resolve", "expire", "supersede", "cancel"):
            with pytest.raises(TransitionNotAllowed):
                interrupt_destination(trigger, ended)


def test_every_run_trigger_is_an_event_kind() -> None:
    assert triggers() <= {kind.value for kind in EventKind}


def test_stale_state_error_names_expected_and_found() -> None:
    error = StaleStateError(run_id="r", expected="queued (version 1)", found="running (version 2)")
    assert str(error) == "run r: expected queued (version 1), found running (version 2)"
    assert "\n" not in str(error)


def test_triggers_are_the_designed_set() -> None:
    assert triggers() == {
        "claim",
        "advance",
        "retry",
        "requeue",
        "suspend",
        "accept_resume",
        "expire",
        "complete",
        "fail",
        "cancel",
        "restart",
    }
