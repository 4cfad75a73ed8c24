"""Cancel, pause and retry act only for an authenticated actor holding one of the flow's
operator roles (issue 11 I); a refusal changes nothing but the run's audit record."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from models import runs as run_store
from models.db import transaction
from models.errors import (
    ConfigurationError,
    InvalidInputError,
    OperatorDeniedError,
    OperatorUnauthenticatedError,
    RunNotFoundError,
)
from worker import add_actor, cancel_run, enqueue_run, get_run, pause_run, revoke_actor
from worker.gateway import authority
from worker.operate import retry_run
from worker.runs import list_events
from worker.testing import TaskRecorder

ACTIONS: dict[str, Callable[..., str]] = {
    "cancel": cancel_run,
    "pause": pause_run,
    "retry": retry_run,
}


def _untouched(run_id: str) -> tuple[Any, ...]:
    run = get_run(run_id)
    return (run.state, run.state_version, run.error, run.pause_requested_by, run.checkpoints)


def _refusals(run_id: str) -> list[tuple[str, Any]]:
    return [(e.actor, e.detail) for e in list_events(run_id) if e.trigger == "operator_refused"]


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize("how", ["bad credential", "unknown actor", "revoked", "no credential"])
def test_an_actor_that_does_not_authenticate_changes_nothing(
    tasks: TaskRecorder, action: str, how: str
) -> None:
    # Given a run and an operator of its flow
    good = add_actor("carol", ["operator"])
    run_id = enqueue_run("quick")
    before, events = _untouched(run_id), list_events(run_id)
    actor, credential = "carol", good
    if how == "bad credential":
        credential = good[:-4] + "abcd"
    elif how == "unknown actor":
        actor = "mallory"
    elif how == "revoked":
        revoke_actor("carol")
    else:
        credential = ""
    # When someone acts with what does not authenticate
    with pytest.raises(OperatorUnauthenticatedError) as refused:
        ACTIONS[action](run_id, actor=actor, credential=credential)
    # Then it is refused in one line that names neither the credential nor whether it was close
    message = str(refused.value)
    assert message == (
        f"{action} of run {run_id} refused (unauthenticated): unknown actor, revoked actor or "
        "bad credential; nothing changed"
    )
    assert good not in message and "\n" not in message
    # And the run is as it was; its record holds the refusal, under the claimed id
    assert _untouched(run_id) == before
    assert list_events(run_id)[: len(events)] == events
    assert _refusals(run_id) == [
        (
            f"human:{actor}",
            {
                "action": action,
                "outcome": "unauthenticated",
                "reason": "unknown actor, revoked actor or bad credential",
            },
        )
    ]
    assert all(good not in str(e.detail) for e in list_events(run_id))


@pytest.mark.parametrize("action", sorted(ACTIONS))
def test_an_actor_without_the_flows_operator_roles_is_denied(
    tasks: TaskRecorder, action: str
) -> None:
    # Given runs of a flow with the default operator role and of one operated by its own team
    approver = add_actor("alice", ["approver"])
    operator = add_actor("carol", ["operator"])
    quick, owned = enqueue_run("quick"), enqueue_run("owned")
    cases = [
        (quick, "alice", approver, "['operator'] of flow quick"),
        (owned, "carol", operator, "['release-ops'] of flow owned"),
    ]
    for run_id, actor, credential, roles in cases:
        before = _untouched(run_id)
        # When an authenticated actor without those roles acts
        with pytest.raises(OperatorDeniedError) as refused:
            ACTIONS[action](run_id, actor=actor, credential=credential)
        # Then it is denied, changes nothing, and the refusal is recorded
        assert str(refused.value) == (
            f"{action} of run {run_id} refused (denied): actor {actor} holds none of the "
            f"operator roles {roles}; nothing changed"
        )
        assert _untouched(run_id) == before
        assert [(a, d["outcome"]) for a, d in _refusals(run_id)] == [(f"human:{actor}", "denied")]


def test_an_operator_of_the_flow_acts_and_is_recorded_as_kind_and_id(tasks: TaskRecorder) -> None:
    # Given a run of a flow operated by release-ops, and a service account holding that role
    bot = add_actor("deploy-bot", ["release-ops"], kind="service")
    paused, cancelled = enqueue_run("owned"), enqueue_run("owned")
    # When it pauses one run and cancels the other, as a service
    by = pause_run(paused, actor=" Deploy-Bot ", credential=bot, actor_type="service")
    assert by == cancel_run(cancelled, actor="deploy-bot", credential=bot, actor_type="service")
    # Then both are recorded under the authenticated id's normal form, with its kind
    assert by == "service:deploy-bot"
    assert get_run(paused).pause_requested_by == "service:deploy-bot"
    assert [(e.trigger, e.actor) for e in list_events(paused)][-1] == (
        "pause_requested",
        "service:deploy-bot",
    )
    assert get_run(cancelled).state == "cancelled"
    assert [(e.trigger, e.actor) for e in list_events(cancelled)][-1] == (
        "cancel",
        "service:deploy-bot",
    )
    assert _refusals(paused) == _refusals(cancelled) == []


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize(("kind", "claimed"), [("service", "human"), ("human", "service")])
def test_an_actor_acts_only_as_the_kind_it_was_added_as(
    tasks: TaskRecorder, action: str, kind: str, claimed: str
) -> None:
    # Given an operator added as one kind, claiming the other
    credential = add_actor("deploy-bot", ["release-ops"], kind=kind)
    run_id = enqueue_run("owned")
    before = _untouched(run_id)
    with pytest.raises(OperatorUnauthenticatedError) as refused:
        ACTIONS[action](run_id, actor="deploy-bot", credential=credential, actor_type=claimed)
    # Then nothing changes, and the refusal is recorded under the kind it claimed
    assert f"actor deploy-bot is a {kind}, not a {claimed}" in str(refused.value)
    assert _untouched(run_id) == before
    assert [(a, d["outcome"]) for a, d in _refusals(run_id)] == [
        (f"{claimed}:deploy-bot", "unauthenticated")
    ]


@pytest.mark.parametrize("action", sorted(ACTIONS))
@pytest.mark.parametrize(
    ("actor", "actor_type", "says"),
    [
        ("system:expiry", "human", "reserved for interlude"),
        ("Worker:celery@host", "human", "reserved for interlude"),
        ("carol", "system", "the actor type must be one of human, service"),
        ("", "human", "needs the acting actor's id"),
        ("x" * 191, "service", "1 to 190"),
    ],
)
def test_nobody_acts_as_interlude_or_as_no_one(
    tasks: TaskRecorder, action: str, actor: str, actor_type: str, says: str
) -> None:
    credential = add_actor("carol", ["operator"])
    run_id = enqueue_run("quick")
    before, events = _untouched(run_id), list_events(run_id)
    with pytest.raises(InvalidInputError, match=says):
        ACTIONS[action](run_id, actor=actor, credential=credential, actor_type=actor_type)
    assert (_untouched(run_id), list_events(run_id)) == (before, events)


def test_an_unknown_run_is_named_only_to_an_authenticated_actor(tasks: TaskRecorder) -> None:
    credential = add_actor("carol", ["operator"])
    with pytest.raises(OperatorUnauthenticatedError):
        cancel_run("no-such-run", actor="carol", credential="ilc_wrong")
    with pytest.raises(RunNotFoundError, match="no run no-such-run"):
        cancel_run("no-such-run", actor="carol", credential=credential)


def test_refusals_on_one_run_are_recorded_up_to_a_bound(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a bound of three refusals per run
    monkeypatch.setattr(authority, "MAX_REFUSALS", 3)
    run_id = enqueue_run("quick")
    # When junk keeps trying to cancel it
    for n in range(5):
        with pytest.raises(OperatorUnauthenticatedError):
            cancel_run(run_id, actor=f"junk{n}", credential="nope")
    # Then the first three are on its record, and it is otherwise untouched
    assert [actor for actor, _ in _refusals(run_id)] == [
        "human:junk0",
        "human:junk1",
        "human:junk2",
    ]
    assert get_run(run_id).state == "queued"


def test_a_run_of_a_flow_not_loaded_here_cannot_be_acted_on(tasks: TaskRecorder) -> None:
    # Given a run of a flow this process does not have (INTERLUDE_FLOWS does not name it)
    credential = add_actor("carol", ["operator"])
    with transaction() as session:
        run_id = run_store.insert_run(
            session,
            flow_name="elsewhere",
            flow_version=1,
            input={},
            first_step="only",
            idempotency_key=None,
            started_by="app",
            budget=None,
        ).id
    before, events = _untouched(run_id), list_events(run_id)
    # When an operator cancels it, Then it is refused: nobody here knows who operates it
    with pytest.raises(ConfigurationError, match="flow 'elsewhere' is not loaded here"):
        cancel_run(run_id, actor="carol", credential=credential)
    assert (_untouched(run_id), list_events(run_id)) == (before, events)
