"""The common claim is one statement on PostgreSQL; anything less common takes the long way.

``models.claims.claim_at_once`` claims a due run at a step of a flow version the worker has: its
compare-and-set, lease, epoch and events, and the run, checkpoint and answers it returns, in one
data-modifying statement that is its own transaction. Whatever it does not match (a version to
migrate, a run not due, a resuming run whose flow revalidates answers, a run already claimed)
it leaves untouched, and the worker's long way (``load_claimable`` then ``claim``) decides.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import select, update

from models import claims as claim_store
from models import runs as store
from models.db import dialect, transaction, utcnow
from models.enums import EventKind, RunState
from models.tables import Event, Run
from tests.services import each_statement, statements_sent
from worker import enqueue_run
from worker.engine.runtime import execute
from worker.testing import TaskRecorder

FIRST = claim_store.ClaimableStep(
    flow="three_steps", version=1, step="first", lease_seconds=45.0, revalidates=False
)


@pytest.fixture()
def pg(db: str, backend: str) -> str:
    if backend != "postgresql":
        pytest.skip("SQLite claims the long way: no data-modifying CTEs, and no round trips")
    return db


def _events(run_id: str) -> list[tuple[str, str | None, str | None, dict[str, object]]]:
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(Event.trigger, Event.from_state, Event.to_state, Event.detail)
            .where(Event.run_id == run_id)
            .order_by(Event.id)
        ).all()
    return [tuple(row) for row in rows]  # type: ignore[misc]


def _claim(run_id: str, steps: list[claim_store.ClaimableStep]) -> claim_store.ClaimedRun | None:
    with transaction(autocommit=True) as session:
        return claim_store.claim_at_once(
            session, run_id, owner="host:1", steps=claim_store.ClaimableSteps(steps)
        )


def test_a_due_run_is_claimed_in_one_statement(pg: str, tasks: TaskRecorder) -> None:
    # Given a queued run of a flow version this process has
    run_id = enqueue_run("three_steps", {"n": 1})
    # When it is claimed at once
    before = utcnow()
    with statements_sent(pg) as statements:
        claimed = _claim(run_id, [FIRST])
    # Then one statement took it: running, a new epoch, the step's lease, its first execution
    assert statements == ["WITH"]
    assert claimed is not None and not claimed.resuming and not claimed.unsettled
    run = claimed.run
    assert (run.state, run.lease_owner, run.lease_epoch, run.step_executions) == (
        RunState.RUNNING.value,
        "host:1",
        1,
        1,
    )
    assert run.lease_expires_at is not None
    assert before + timedelta(seconds=44) < run.lease_expires_at <= utcnow() + timedelta(seconds=45)
    assert (claimed.checkpoint.seq, claimed.checkpoint.next_step) == (0, "first")
    assert claimed.answered == []
    # ...and the run's record says so, as the long way's claim would
    with transaction(readonly=True) as session:
        stored = store.load_run(session, run_id)
    assert (stored.state, stored.state_version, stored.lease_epoch) == ("running", 1, 1)
    assert _events(run_id)[-1] == ("claim", "queued", "running", {"epoch": 1, "step": "first"})


def test_a_step_claimed_again_says_it_runs_again(pg: str, tasks: TaskRecorder) -> None:
    # Given a run whose claim was lost (its lease expired and the reaper requeued it)
    run_id = enqueue_run("three_steps", {"n": 1})
    first = _claim(run_id, [FIRST])
    assert first is not None
    with transaction() as session:
        store.move(session, first.run, EventKind.REQUEUE, actor="system:reaper", lease_owner=None)
    # When it is claimed again
    again = _claim(run_id, [FIRST])
    # Then its second execution is counted, after the claim, as the long way writes it
    assert again is not None and again.run.step_executions == 2 and again.run.lease_epoch == 2
    assert _events(run_id)[-2:] == [
        ("claim", "queued", "running", {"epoch": 2, "step": "first"}),
        ("step_reexecuted", None, None, {"step": "first", "executions": 2}),
    ]


@pytest.mark.parametrize("why", ["other version", "other step", "not due", "claimed"])
def test_what_is_not_simple_is_left_untouched(pg: str, tasks: TaskRecorder, why: str) -> None:
    # Given a queued run that the steps given do not cover, or that is not due or not queued
    run_id = enqueue_run("three_steps", {"n": 1})
    steps = [FIRST]
    if why == "other version":
        steps = [claim_store.ClaimableStep("three_steps", 2, "first", 30.0, False)]
    elif why == "other step":
        steps = [claim_store.ClaimableStep("three_steps", 1, "second", 30.0, False)]
    elif why == "not due":
        with transaction() as session:
            later = utcnow() + timedelta(minutes=5)
            session.execute(update(Run).where(Run.id == run_id).values(not_before=later))
    else:
        assert _claim(run_id, steps) is not None
    events = _events(run_id)
    with transaction(readonly=True) as session:
        version = store.load_run(session, run_id).state_version
    # When the worker tries to claim it at once, Then nothing happens: the long way decides
    assert _claim(run_id, steps) is None
    assert _events(run_id) == events
    with transaction(readonly=True) as session:
        assert store.load_run(session, run_id).state_version == version


def test_a_resuming_run_of_a_flow_that_revalidates_takes_the_long_way(
    pg: str, tasks: TaskRecorder
) -> None:
    # Given a run that waits to be resumed (as an accepted resume leaves it)
    run_id = enqueue_run("three_steps", {"n": 1})
    with transaction() as session:
        session.execute(update(Run).where(Run.id == run_id).values(state="resuming"))
    # When its flow checks answers again in the worker, Then the statement leaves it alone...
    revalidating = claim_store.ClaimableStep("three_steps", 1, "first", 30.0, True)
    assert _claim(run_id, [revalidating]) is None
    # ...and when it does not, the run is claimed, from resuming
    claimed = _claim(run_id, [FIRST])
    assert claimed is not None and claimed.resuming


def test_each_backend_claims_its_own_way_with_the_same_record(
    db: str, backend: str, tasks: TaskRecorder
) -> None:
    # Given either backend, When a run's steps execute through the worker's code
    run_id = enqueue_run("three_steps", {"n": 1})
    tasks.drain()
    # Then the run finished with one claim (its next steps were chained), either way
    with transaction(readonly=True) as session:
        assert dialect(session).claims_in_one_statement is (backend == "postgresql")
        assert store.load_run(session, run_id).state == RunState.SUCCEEDED.value
    claims = [e for e in _events(run_id) if e[0] == "claim"]
    assert claims[0] == ("claim", "queued", "running", {"epoch": 1, "step": "first"})


def test_a_delivery_with_nothing_to_claim_says_so(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a run that finished, and a second delivery of its task (a requeued message)
    run_id = enqueue_run("quick", {})
    tasks.drain()
    caplog.set_level(logging.INFO, logger="worker")
    # When a worker executes that delivery, it does nothing, and one line says why (the task
    # itself ends as succeeded)
    assert execute(run_id) is None
    (line,) = [r for r in caplog.records if getattr(r, "action", None) == "claim_skipped"]
    assert getattr(line, "run_id", None) == run_id
    assert "delivery ignored" in line.getMessage()


@contextmanager
def _claim_steps_sent(url: str) -> Iterator[list[list[str]]]:
    """For each one-statement claim this process sends within the block, the flows named in
    its claimable-steps parameter (the statement reads it as ``s(flow, ...)``)."""
    sent: list[list[str]] = []

    def seen(sql: str, params: Any) -> None:
        if " AS s(flow " not in sql:
            return
        for value in params.values() if isinstance(params, dict) else params:
            if isinstance(value, str) and value.startswith("["):
                sent.append(sorted({step["flow"] for step in json.loads(value)}))

    with each_statement(url, seen):
        yield sent


def test_a_task_naming_its_flow_claims_with_that_flows_steps_only(
    pg: str, tasks: TaskRecorder
) -> None:
    # Given a queued run, and a worker that has many flows
    run_id = enqueue_run("three_steps", {"n": 1})
    tasks.clear()
    # When its task, naming the run's flow (as its message does), is executed
    with _claim_steps_sent(pg) as sent:
        execute(run_id, flow="three_steps")
    # Then the claim sent the server that flow's steps, not every flow's, and took the run
    assert sent == [["three_steps"]]
    assert [e[0] for e in _events(run_id)][:2] == ["enqueue", "claim"]
    # ...where a task that names none sends them all, as before
    other = enqueue_run("three_steps", {"n": 2})
    tasks.clear()
    with _claim_steps_sent(pg) as sent:
        execute(other)
    (flows,) = sent
    assert "three_steps" in flows and len(flows) > 1


def test_a_task_naming_another_flow_still_claims_its_run(pg: str, tasks: TaskRecorder) -> None:
    # Given a queued run, and its task naming a flow the run is not of (a message altered, or
    # a publisher's mistake)
    run_id = enqueue_run("three_steps", {"n": 1})
    tasks.clear()
    # When it is executed, Then the one-statement claim matches nothing and the long way takes
    # the run: a wrong name costs a round trip, never a run
    execute(run_id, flow="quick")
    tasks.drain()
    with transaction(readonly=True) as session:
        assert store.load_run(session, run_id).state == RunState.SUCCEEDED.value
    claims = [e for e in _events(run_id) if e[0] == "claim"]
    assert claims[0] == ("claim", "queued", "running", {"epoch": 1, "step": "first"})
    # ...and a flow this process does not have sends no one-statement claim at all
    other = enqueue_run("three_steps", {"n": 2})
    tasks.clear()
    with _claim_steps_sent(pg) as sent:
        execute(other, flow="no_such_flow")
    assert sent == []
    tasks.drain()
    with transaction(readonly=True) as session:
        assert store.load_run(session, other).state == RunState.SUCCEEDED.value
