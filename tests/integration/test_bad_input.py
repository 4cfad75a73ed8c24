"""Bad input gets a one-line error naming what is wrong, and writes nothing."""

from __future__ import annotations

import math

import pytest
from sqlalchemy import func, select

from models import runs as run_store
from models.db import transaction
from models.errors import (
    ActorError,
    InvalidInputError,
    InvalidTransitionError,
    RunNotFoundError,
    UnknownFlowError,
)
from models.tables import Checkpoint, Event, Run
from worker import add_actor, cancel_run, enqueue_run, get_run, list_actors, set_actor_roles
from worker.operate import wait_for_run


def _counts() -> tuple[int, int, int]:
    with transaction(readonly=True) as session:
        return tuple(  # type: ignore[return-value]
            session.execute(select(func.count()).select_from(t)).scalar_one()
            for t in (Run, Checkpoint, Event)
        )


def _one_line(error: BaseException) -> str:
    text = str(error)
    assert text and "\n" not in text
    return text


def test_unknown_flow_is_refused_and_writes_nothing(db: str) -> None:
    with pytest.raises(UnknownFlowError) as caught:
        enqueue_run("no_such_flow", {})
    assert "unknown flow 'no_such_flow'" in _one_line(caught.value)
    assert _counts() == (0, 0, 0)


@pytest.mark.parametrize("bad", [{"x": {1, 2}}, {"x": math.nan}, {"x": object()}])
def test_input_that_is_not_json_is_refused_and_writes_nothing(db: str, bad: object) -> None:
    with pytest.raises(InvalidInputError) as caught:
        enqueue_run("three_steps", bad)
    assert "not JSON" in _one_line(caught.value)
    assert _counts() == (0, 0, 0)


def _queued_run() -> str:
    """A queued run that no worker hears about (nothing is published for it)."""
    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name="three_steps",
            flow_version=1,
            input={"n": 1},
            first_step="first",
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        return run.id


def test_invalid_trigger_is_refused_and_writes_nothing(db: str) -> None:
    run_id = _queued_run()
    before = _counts()
    with pytest.raises(InvalidTransitionError) as caught, transaction() as session:
        run = run_store.load_run(session, run_id)
        run_store.move(session, run, "complete", actor="test")
    assert _one_line(caught.value) == f"run {run_id}: cannot complete from queued"
    assert _counts() == before
    assert get_run(run_id).state == "queued"


def test_cancelling_a_finished_run_is_refused(db: str) -> None:
    run_id = _queued_run()
    ops = add_actor("ops", ["operator"])
    cancel_run(run_id, actor="ops", credential=ops, reason="not needed")
    before = _counts()
    with pytest.raises(InvalidTransitionError) as caught:
        cancel_run(run_id, actor="ops", credential=ops)
    assert _one_line(caught.value) == f"run {run_id}: cannot cancel from cancelled"
    assert _counts() == before


def test_same_idempotency_key_returns_the_same_run(db: str) -> None:
    first = enqueue_run("three_steps", {"n": 1}, idempotency_key="order-17")
    again = enqueue_run("three_steps", {"n": 1}, idempotency_key="order-17")
    assert first == again
    assert _counts()[0] == 1
    with pytest.raises(InvalidInputError):
        enqueue_run("quick", {}, idempotency_key="order-17")


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"customer": "a\x00b", "amount": 1}, "at 'customer'"),
        ({"customer": "\ud800", "amount": 1}, "at 'customer'"),
        ({"items": [{"note": "ok"}, {"note": "x\udfff"}]}, "at 'items[1].note'"),
        ({"nested": {"a\x00": 1}}, "at 'nested.a\\x00'"),
        ({"\udcff": 1}, "at '\\udcff'"),
        ("\x00", "characters"),
    ],
    ids=["nul", "surrogate", "deep-value", "nul-key", "surrogate-key", "top"],
)
def test_input_with_nul_or_unpaired_surrogates_is_refused_on_either_database(
    db: str, bad: object, where: str
) -> None:
    # PostgreSQL refuses both in JSON (as a database error); SQLite stored them. Either way,
    # the input is refused by name, where it is, and nothing is written.
    with pytest.raises(InvalidInputError) as caught:
        enqueue_run("three_steps", bad)
    said = _one_line(caught.value)
    assert "input for flow 'three_steps' holds NUL or unpaired surrogate characters" in said
    assert said.endswith(where)
    assert said.isascii()
    assert _counts() == (0, 0, 0)


@pytest.mark.parametrize("key", ["order\x0017", "order\udcff"], ids=["nul", "surrogate"])
def test_an_idempotency_key_with_nul_or_surrogates_is_refused(db: str, key: str) -> None:
    # PostgreSQL refused it as a database error when the key was looked up.
    with pytest.raises(InvalidInputError, match="idempotency key holds NUL") as caught:
        enqueue_run("three_steps", {"n": 1}, idempotency_key=key)
    assert _one_line(caught.value)
    assert _counts() == (0, 0, 0)


def test_a_surrogate_pair_is_one_character_and_accepted(db: str) -> None:
    # "\ud83d\ude00" in JSON is one character (an emoji): nothing unpaired about it.
    run_id = enqueue_run("three_steps", {"n": 1, "note": "\U0001f600 \u00e9"})
    assert get_run(run_id).input == {"n": 1, "note": "\U0001f600 \u00e9"}


@pytest.mark.parametrize(
    "roles", [["finance", ""], ["", "finance"], ["finance", "   ", "legal"]], ids=str
)
def test_a_blank_role_among_others_is_refused_not_dropped(db: str, roles: list[str]) -> None:
    # Dropping it silently would leave an actor with fewer roles than were asked for.
    with pytest.raises(ActorError, match="is blank") as caught:
        add_actor("bob", roles)
    assert _one_line(caught.value).startswith("actor bob: role '")
    assert list_actors() == []
    # Replacing the roles of an existing actor: refused alike, the roles it had kept.
    add_actor("carol", ["approver"])
    with pytest.raises(ActorError, match="is blank"):
        set_actor_roles("carol", roles)
    assert [a.roles for a in list_actors()] == [["approver"]]


@pytest.mark.parametrize("run_id", ["ab\ud800", "ab\x00"])
def test_an_id_no_row_can_hold_is_not_found(db: str, run_id: str) -> None:
    with pytest.raises(RunNotFoundError):
        get_run(run_id)


@pytest.mark.parametrize(
    ("reason", "says"),
    [("a\ud800", "unpaired surrogate"), ("a\x00b", "NUL"), (None, "must be text")],
)
def test_a_cancel_s_reason_no_database_can_store_is_refused(
    db: str, reason: object, says: str
) -> None:
    credential = add_actor("ops", ["operator"])
    run_id = enqueue_run("approval", {"env": "qa"})
    before = _counts()
    with pytest.raises(InvalidInputError) as caught:
        cancel_run(run_id, actor="ops", credential=credential, reason=reason)  # type: ignore[arg-type]
    assert says in _one_line(caught.value)
    assert _counts() == before
    assert get_run(run_id).state == "queued"


@pytest.mark.parametrize("timeout", [math.nan, math.inf, -1, "5", True])
def test_a_wait_s_timeout_must_be_a_finite_number(db: str, timeout: object) -> None:
    run_id = enqueue_run("approval", {"env": "qa"})
    with pytest.raises(InvalidInputError, match="timeout must be a finite number"):
        wait_for_run(run_id, timeout=timeout)  # type: ignore[arg-type]
