"""The Python API refuses an argument of the wrong type or out of range: one line naming the
parameter, raised before anything is read or written, alike on SQLite and PostgreSQL (where
the drivers used to fail each in its own way, or quietly read -1 as "no limit")."""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any

import pytest
from sqlalchemy import func, select

from models.db import transaction
from models.errors import ActorError, ActorNotFoundError, InterludeError, InvalidInputError
from models.tables import Actor, Checkpoint, Effect, Event, Interrupt, ResumeAttempt, Run
from worker import interrupts, operate, runs
from worker.engine import reaper, sweeps
from worker.gateway import actors
from worker.ops import retention
from worker.testing import TaskRecorder

NAIVE = datetime(2020, 1, 1)
# Before the first moment UTC has: 0001-01-01T00:00:00+14:00 is 0000-12-31 in UTC.
BEFORE_UTC = datetime(1, 1, 1, tzinfo=timezone(timedelta(hours=14)))
HUGE = 10**30
NOT_TEXT = "an actor id must be text"
NOT_FOUND = ActorNotFoundError


def _tomorrow() -> datetime:
    # After the finished run's end: a purge that went ahead would delete it.
    return datetime.now(UTC) + timedelta(days=1)


def case(
    name: str, call: Callable[[], Any], named: str, error: type[InterludeError] = InvalidInputError
) -> Any:
    """A bad call, the error it must raise and the text that names the parameter."""
    return pytest.param(call, error, named, id=name)


find, purge, enqueue = operate.find_runs, retention.purge_finished_runs, runs.enqueue_run
attempts, counted = interrupts.list_resume_attempts, interrupts.count_resume_attempts
QA = {"env": "qa"}

BAD_CALLS = [
    # worker.operate.find_runs
    case("find-before-naive", lambda: find(started_before=NAIVE), "started_before"),
    case("find-before-str", lambda: find(started_before="2020-01-01"), "started_before"),
    case("find-before-date", lambda: find(started_before=date(2020, 1, 1)), "started_before"),
    case("find-before-past-utc", lambda: find(started_before=BEFORE_UTC), "started_before"),
    case("find-flow-list", lambda: find(flow=["a"]), "flow"),
    case("find-flow-int", lambda: find(flow=5), "flow"),
    case("find-flow-nul", lambda: find(flow="a\x00"), "flow"),
    case("find-started-by-int", lambda: find(started_by=5), "started_by"),
    case("find-started-by-surrogate", lambda: find(started_by="a\ud800"), "started_by"),
    case("find-limit-nan", lambda: find(limit=math.nan), "limit"),
    case("find-limit-huge", lambda: find(limit=HUGE), "limit"),
    case("find-limit-negative", lambda: find(limit=-1), "limit"),
    case("find-limit-zero", lambda: find(limit=0), "limit"),
    case("find-limit-true", lambda: find(limit=True), "limit"),
    case("find-limit-float", lambda: find(limit=1.5), "limit"),
    case("find-limit-str", lambda: find(limit="5"), "limit"),
    # worker.runs.list_runs
    case("list-runs-flow-int", lambda: runs.list_runs(flow=5), "flow"),
    case("list-runs-limit-nan", lambda: runs.list_runs(limit=math.nan), "limit"),
    case("list-runs-limit-huge", lambda: runs.list_runs(limit=HUGE), "limit"),
    case("list-runs-limit-negative", lambda: runs.list_runs(limit=-1), "limit"),
    case("list-runs-limit-none", lambda: runs.list_runs(limit=None), "limit"),
    # worker.ops.retention.purge_finished_runs
    case("purge-str", lambda: purge("2020-01-01"), "finished_before"),
    case("purge-date", lambda: purge(date(2020, 1, 1)), "finished_before"),
    case("purge-past-utc", lambda: purge(BEFORE_UTC), "finished_before"),
    case("purge-dry-run-none", lambda: purge(_tomorrow(), dry_run=None), "dry_run"),
    case("purge-dry-run-zero", lambda: purge(_tomorrow(), dry_run=0), "dry_run"),
    case("purge-dry-run-str", lambda: purge(_tomorrow(), dry_run="no"), "dry_run"),
    case("purge-batch-str", lambda: purge(_tomorrow(), batch="5"), "purge batch"),
    case("purge-batch-float", lambda: purge(_tomorrow(), batch=1.5), "purge batch"),
    case("purge-batch-nan", lambda: purge(_tomorrow(), dry_run=False, batch=math.nan), "batch"),
    case("purge-batch-huge", lambda: purge(_tomorrow(), dry_run=False, batch=HUGE), "batch"),
    case("purge-batch-true", lambda: purge(_tomorrow(), dry_run=False, batch=True), "batch"),
    # worker.engine.sweeps.sweep_expired and worker.engine.reaper.reap
    case("sweep-batch-str", lambda: sweeps.sweep_expired(batch="5"), "sweep batch"),
    case("sweep-batch-true", lambda: sweeps.sweep_expired(batch=True), "sweep batch"),
    case("sweep-batch-float", lambda: sweeps.sweep_expired(batch=1.5), "sweep batch"),
    case("sweep-batch-huge", lambda: sweeps.sweep_expired(batch=HUGE), "sweep batch"),
    case("sweep-now-str", lambda: sweeps.sweep_expired(now="2020-01-01"), "now"),
    case("sweep-now-naive", lambda: sweeps.sweep_expired(now=NAIVE), "now"),
    case("sweep-now-int", lambda: sweeps.sweep_expired(now=5), "now"),
    case(
        "sweep-bring-forward-none", lambda: sweeps.sweep_report(bring_forward=None), "bring_forward"
    ),
    case("reap-batch-str", lambda: reaper.reap(batch="5"), "reaper batch"),
    case("reap-batch-true", lambda: reaper.reap(batch=True), "reaper batch"),
    case("reap-batch-huge", lambda: reaper.reap(batch=HUGE), "reaper batch"),
    case("reap-now-str", lambda: reaper.reap(now="2020-01-01"), "now"),
    case("reap-now-naive", lambda: reaper.reap(now=NAIVE), "now"),
    case("reap-now-int", lambda: reaper.reap(now=5), "now"),
    # worker.runs.enqueue_run
    case("enqueue-flow-int", lambda: enqueue(5, {}), "flow_name"),
    case("enqueue-flow-none", lambda: enqueue(None, {}), "flow_name"),
    case("enqueue-key-int", lambda: enqueue("approval", QA, idempotency_key=5), "idempotency key"),
    case("enqueue-key-bytes", lambda: enqueue("approval", QA, idempotency_key=b"k"), "key"),
    case("enqueue-budget-str", lambda: enqueue("approval", QA, budget="5"), "budget"),
    case("enqueue-budget-true", lambda: enqueue("approval", QA, budget=True), "budget"),
    case("enqueue-budget-huge", lambda: enqueue("approval", QA, budget=10**400), "budget"),
    # worker.interrupts
    case("interrupts-run-int", lambda: interrupts.list_interrupts(run_id=5), "run_id"),
    case("interrupts-run-nul", lambda: interrupts.list_interrupts(run_id="a\x00"), "run_id"),
    case("interrupts-limit-nan", lambda: interrupts.list_interrupts(limit=math.nan), "limit"),
    case("interrupts-limit-huge", lambda: interrupts.list_interrupts(limit=HUGE), "limit"),
    case("interrupts-limit-negative", lambda: interrupts.list_interrupts(limit=-1), "limit"),
    case("interrupts-limit-true", lambda: interrupts.list_interrupts(limit=True), "limit"),
    case("attempts-interrupt-int", lambda: attempts(interrupt_id=5), "interrupt_id"),
    case("attempts-run-int", lambda: attempts(run_id=5), "run_id"),
    case("attempts-run-surrogate", lambda: attempts(run_id="a\ud800"), "run_id"),
    case("attempts-before-str", lambda: attempts(before="5"), "before"),
    case("attempts-before-huge", lambda: attempts(before=HUGE), "before"),
    case("attempts-before-nan", lambda: attempts(before=math.nan), "before"),
    case("attempts-limit-negative", lambda: attempts(limit=-1), "limit"),
    case("count-attempts-run-int", lambda: counted(run_id=5), "run_id"),
    case("count-attempts-interrupt-int", lambda: counted(interrupt_id=5), "interrupt_id"),
    case("count-attempts-run-nul", lambda: counted(run_id="a\x00"), "run_id"),
    # worker.gateway.actors: refused as the module refuses a bad actor id or roles (ActorError)
    case("add-actor-roles-int", lambda: actors.add_actor("bob", 5), "roles", ActorError),
    case("add-actor-roles-none", lambda: actors.add_actor("bob", None), "roles", ActorError),
    case("set-roles-roles-int", lambda: actors.set_actor_roles("ops", 5), "roles", ActorError),
    case("set-roles-id-int", lambda: actors.set_actor_roles(5, ["x"]), NOT_TEXT, ActorError),
    case("revoke-id-int", lambda: actors.revoke_actor(5), NOT_TEXT, ActorError),
    case("rotate-id-int", lambda: actors.rotate_actor(5), NOT_TEXT, ActorError),
    case("rotate-id-list", lambda: actors.rotate_actor(["ops"]), NOT_TEXT, ActorError),
    # No actor can have an id holding NUL or a lone surrogate (PostgreSQL cannot look one up):
    # not found, the id quoted.
    case("rotate-id-nul", lambda: actors.rotate_actor("ops\x00"), "'ops\\x00'", NOT_FOUND),
    case(
        "revoke-id-surrogate", lambda: actors.revoke_actor("ops\ud800"), "'ops\\ud800'", NOT_FOUND
    ),
    case(
        "set-roles-id-nul",
        lambda: actors.set_actor_roles("ops\x00", ["x"]),
        "'ops\\x00'",
        NOT_FOUND,
    ),
]


def _state() -> tuple[Any, ...]:
    """Every row count, every run's state and every actor's roles and credential."""
    with transaction(readonly=True) as session:
        counts = tuple(
            session.execute(select(func.count()).select_from(table)).scalar_one()
            for table in (Run, Checkpoint, Event, Interrupt, ResumeAttempt, Effect, Actor)
        )
        run_rows = session.execute(
            select(Run.id, Run.state, Run.state_version, Run.dispatched_at).order_by(Run.id)
        ).all()
        actor_rows = session.execute(
            select(Actor.id, Actor.roles, Actor.credential_hash, Actor.revoked_at).order_by(
                Actor.id
            )
        ).all()
    return counts, [tuple(r) for r in run_rows], [tuple(a) for a in actor_rows]


@pytest.fixture()
def world(tasks: TaskRecorder) -> TaskRecorder:
    """An operator, a queued run and a cancelled one: what a bad call must leave as it was."""
    credential = actors.add_actor("ops", ["operator"])
    runs.enqueue_run("approval", {"env": "qa"})
    finished = runs.enqueue_run("approval", {"env": "qa"})
    runs.cancel_run(finished, actor="ops", credential=credential, reason="done with it")
    return tasks


@pytest.mark.parametrize(("call", "error", "named"), BAD_CALLS)
def test_a_bad_argument_is_refused_in_one_line_and_changes_nothing(
    world: TaskRecorder, call: Callable[[], Any], error: type[InterludeError], named: str
) -> None:
    before = _state()
    published = len(world.published)
    with pytest.raises(error) as caught:
        call()
    said = str(caught.value)
    # One printable line (an id holding NUL is quoted, not printed), naming the parameter.
    assert said and "\n" not in said and said.isprintable(), said
    assert named in said, said
    assert _state() == before
    assert len(world.published) == published


def test_runs_are_found_by_their_starter_however_the_id_is_typed(tasks: TaskRecorder) -> None:
    run_id = enqueue("quick", started_by="Alice")
    assert [r.id for r in find(started_by=" ALICE ")] == [run_id]
    assert [r.id for r in find(started_by="alice")] == [run_id]
    assert find(started_by="bob") == []
