"""Several asks at once: a group released by all, any or k of its answers, on both databases.

Each ask is a full interrupt answered by its own contract. An answer that does not meet the
group's need is recorded and the run waits on; the one that meets it releases the run, and the
asks still open close as superseded (a late answer is stale). Answers racing for the last
place complete the group once. An expired ask counts as not given.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest

from models.contracts import InterruptView
from models.db import utcnow
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for, drain_finished
from worker import add_actor, enqueue_run, get_run, list_interrupts, submit_resume
from worker.engine.sweeps import sweep_report
from worker.runs import list_events
from worker.testing import TaskRecorder, drain

pytestmark = pytest.mark.usefixtures("scratch")


@pytest.fixture()
def teams(db: str) -> dict[str, str]:
    return {team: add_actor(f"{team}-lead", [team]) for team in ("finance", "legal", "security")}


def _asks(run_id: str) -> dict[str, InterruptView]:
    run = get_run(run_id)
    return {i.name: i for i in run.pending_interrupts}


def _answer(teams: dict[str, str], ask: InterruptView, decision: str = "approved") -> Any:
    return submit_resume(contract_for(ask, f"{ask.name}-lead", decision=decision), teams[ask.name])


def _statuses(run_id: str) -> dict[str, str]:
    return {i.name: i.status for i in list_interrupts(run_id=run_id)}


def test_an_all_group_waits_for_every_answer(teams: dict[str, str], tasks: TaskRecorder) -> None:
    run_id = enqueue_run("signoff", {"need": "all"})
    drain()
    asks = _asks(run_id)
    # Both asks wait at once, as one group that needs both
    assert sorted(asks) == ["finance", "legal"]
    assert {(i.ask_group, i.group_need) for i in asks.values()} == {("signoff", 2)}
    # When finance answers, Then it is accepted and the run waits on legal (nothing published)
    first = _answer(teams, asks["finance"])
    assert first.accepted and "1 of 2" in first.reason
    drain()
    assert get_run(run_id).state == "waiting"
    assert [i.name for i in get_run(run_id).pending_interrupts] == ["legal"]
    assert [e.trigger for e in list_events(run_id)].count("ask_answered") == 1
    # When legal answers too, Then the run goes on with both answers
    assert _answer(teams, asks["legal"]).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {
        "answered": ["finance", "legal"],
        "approved": ["finance", "legal"],
    }


def test_an_any_group_goes_on_with_the_first_answer_and_closes_the_rest(
    teams: dict[str, str], tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("signoff", {"need": "any", "teams": ["finance", "legal", "security"]})
    drain()
    asks = _asks(run_id)
    # When legal answers first
    assert _answer(teams, asks["legal"]).accepted
    # Then the other asks are closed as superseded, with the reason recorded
    assert _statuses(run_id) == {
        "finance": "superseded",
        "legal": "resolved",
        "security": "superseded",
    }
    [closed] = [e for e in list_events(run_id) if e.trigger == "group_closed"]
    assert sorted(closed.detail["closed"]) == sorted([asks["finance"].id, asks["security"].id])
    # And a late answer to one of them is stale
    late = _answer(teams, asks["finance"])
    assert late.outcome == "stale", late.reason
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output["answered"] == ["legal"]


def test_a_two_of_three_group_needs_two(teams: dict[str, str], tasks: TaskRecorder) -> None:
    run_id = enqueue_run("signoff", {"need": 2, "teams": ["finance", "legal", "security"]})
    drain()
    asks = _asks(run_id)
    assert _answer(teams, asks["security"], "rejected").accepted
    drain()
    assert get_run(run_id).state == "waiting"
    assert _answer(teams, asks["finance"]).accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).output == {"answered": ["finance", "security"], "approved": ["finance"]}
    assert _statuses(run_id)["legal"] == "superseded"


def test_answers_racing_for_the_last_place_complete_the_group_once(
    teams: dict[str, str], tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("signoff", {"need": 2, "teams": ["finance", "legal", "security"]})
    drain()
    asks = _asks(run_id)
    assert _answer(teams, asks["finance"]).accepted
    # When legal and security answer at the same moment for the last place
    start = threading.Barrier(2)
    outcomes: dict[str, str] = {}

    def answer(name: str) -> None:
        start.wait(timeout=10)
        outcomes[name] = _answer(teams, asks[name]).outcome.value

    racers = [threading.Thread(target=answer, args=(n,)) for n in ("legal", "security")]
    for racer in racers:
        racer.start()
    for racer in racers:
        racer.join(timeout=30)
    # Then one completes the group and the other is stale; the run is released once
    assert sorted(outcomes.values()) == ["accepted", "stale"], outcomes
    releases = [e for e in list_events(run_id) if e.trigger == "accept_resume"]
    assert len(releases) == 1
    assert drain_finished(run_id) == "succeeded"
    assert len(get_run(run_id).output["answered"]) == 2


def _sweep(hours: float) -> None:
    sweep_report(now=utcnow() + timedelta(hours=hours))


def test_an_expired_ask_fails_an_all_group(teams: dict[str, str], tasks: TaskRecorder) -> None:
    run_id = enqueue_run("signoff", {"need": "all"})
    drain()
    assert _answer(teams, _asks(run_id)["legal"]).accepted
    # When finance's ask (the first to expire) passes its deadline
    _sweep(1.5)
    # Then the group can no longer have both answers: the run expires
    assert get_run(run_id).state == "expired"


def test_an_expired_ask_counts_as_not_given_in_an_any_group(
    teams: dict[str, str], tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("signoff", {"need": "any", "teams": ["finance", "legal"]})
    drain()
    asks = _asks(run_id)
    # When finance's ask expires, Then the run still waits on legal
    _sweep(1.5)
    assert get_run(run_id).state == "waiting"
    assert _statuses(run_id) == {"finance": "expired", "legal": "pending"}
    assert _answer(teams, asks["legal"]).accepted
    assert drain_finished(run_id) == "succeeded"


def test_expired_asks_fail_a_k_group_only_once_it_cannot_be_met(
    teams: dict[str, str], tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("signoff", {"need": 2, "teams": ["finance", "legal", "security"]})
    drain()
    # One of three expires: two can still answer
    _sweep(1.5)
    assert get_run(run_id).state == "waiting"
    # Two of three expired: the group cannot have two answers
    _sweep(2.5)
    assert get_run(run_id).state == "expired"


def test_a_default_answers_its_ask_and_counts(teams: dict[str, str], tasks: TaskRecorder) -> None:
    run_id = enqueue_run(
        "signoff", {"need": "all", "on_expiry": {"finance": "default", "legal": "expire"}}
    )
    drain()
    asks = _asks(run_id)
    _sweep(1.5)  # finance's default is given; legal still open
    drain()
    assert get_run(run_id).state == "waiting"
    assert _answer(teams, asks["legal"]).accepted
    assert drain_finished(run_id) == "succeeded"


def test_every_answer_of_a_group_binds_where_the_step_acts(
    teams: dict[str, str], tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("signoff", {"need": "all"})
    drain()
    asks = _asks(run_id)
    assert _answer(teams, asks["finance"]).accepted
    assert _answer(teams, asks["legal"]).accepted
    # When the amount changes before the step acts on the answers
    scratch_redis().set(f"amount:{run_id}", 200)
    drain()
    # Then neither answer applies: both are asked again, as a group
    run = get_run(run_id)
    assert run.state == "waiting"
    renewed = {i.name: i for i in run.pending_interrupts}
    assert sorted(renewed) == ["finance", "legal"]
    assert renewed["finance"].evidence == {"amount": 200}
    assert renewed["finance"].supersedes == asks["finance"].id
    assert _answer(teams, renewed["finance"]).accepted
    assert _answer(teams, renewed["legal"]).accepted
    assert drain_finished(run_id) == "succeeded"


def test_a_run_shows_its_group_as_a_group(teams: dict[str, str], tasks: TaskRecorder) -> None:
    run_id = enqueue_run("signoff", {"need": 2, "teams": ["finance", "legal", "security"]})
    drain()
    asks = _asks(run_id)
    assert _answer(teams, asks["legal"]).accepted
    [group] = get_run(run_id).ask_groups
    assert (group.group, group.need, group.still_needed) == ("signoff", 2, 1)
    assert group.answered == ["legal"]
    assert sorted(group.open) == ["finance", "security"]
    assert group.closed == []
