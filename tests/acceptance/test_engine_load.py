"""The run engine under load, duplicate deliveries and a killed worker (real processes)."""

from __future__ import annotations

import os
import re
from collections.abc import Callable

import redis
from sqlalchemy import func, select

from models import runs as run_store
from models.db import transaction, utcnow
from models.settings import DEFAULT_MAX_CLAIMS
from models.tables import Checkpoint, Event, Run
from tests.acceptance.brokers import messages_held
from tests.services import WorkerProcess, wait_for
from worker import app, enqueue_run, get_run
from worker.engine.reaper import reap
from worker.engine.tasknames import QUEUE_STEPS, TASK_STEP

RUNS = 200


def _states(run_ids: list[str]) -> dict[str, int]:
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(Run.state, func.count()).where(Run.id.in_(run_ids)).group_by(Run.state)
        ).all()
    return {state: count for state, count in rows}


def _checkpoint_seqs(run_ids: list[str]) -> dict[str, list[int]]:
    seqs: dict[str, list[int]] = {run_id: [] for run_id in run_ids}
    with transaction(readonly=True) as session:
        for run_id, seq in session.execute(
            select(Checkpoint.run_id, Checkpoint.seq)
            .where(Checkpoint.run_id.in_(run_ids))
            .order_by(Checkpoint.run_id, Checkpoint.seq)
        ):
            seqs[run_id].append(seq)
    return seqs


def test_200_runs_across_two_workers_commit_every_step_once(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given two worker processes with concurrency 2 each
    start_worker("-c", "2")
    start_worker("-c", "2")
    # When 200 three-step runs are enqueued
    run_ids = [enqueue_run("three_steps", {"n": i}) for i in range(RUNS)]
    # Then every run succeeds...
    wait_for(lambda: _states(run_ids).get("succeeded") == RUNS, timeout=240, interval=0.5)
    # ...with checkpoints 0..3 and nothing else, and the output each run's own input implies
    assert all(seqs == [0, 1, 2, 3] for seqs in _checkpoint_seqs(run_ids).values())
    with transaction(readonly=True) as session:
        outputs = dict(session.execute(select(Run.id, Run.output).where(Run.id.in_(run_ids))).all())
        completes = session.execute(
            select(func.count())
            .select_from(Event)
            .where(Event.run_id.in_(run_ids), Event.trigger.in_(["advance", "complete"]))
        ).scalar_one()
    for i, run_id in enumerate(run_ids):
        assert outputs[run_id] == {"trail": ["first", "second", "third"], "n": i + 2}
    assert completes == RUNS * 3


def _queued_run(flow: str, first_step: str, input: dict[str, object]) -> str:
    """A queued run whose first task is not published yet (the test publishes it)."""
    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name=flow,
            flow_version=1,
            input=input,
            first_step=first_step,
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        return run.id


def test_same_run_published_twice_at_once_commits_the_step_once(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    start_worker("-c", "2")
    start_worker("-c", "2")
    run_ids = [_queued_run("quick", "only", {}) for _ in range(10)]
    # When run_step is published several times for each run at the same moment
    for run_id in run_ids:
        for _ in range(4):
            app.send_task(TASK_STEP, args=[run_id], queue=QUEUE_STEPS)
    wait_for(lambda: _states(run_ids).get("succeeded") == len(run_ids), timeout=60)
    # Then exactly one delivery per run claimed it and committed the step
    with transaction(readonly=True) as session:
        claims = session.execute(
            select(Event.run_id, func.count())
            .where(Event.run_id.in_(run_ids), Event.trigger == "claim")
            .group_by(Event.run_id)
        ).all()
    assert sorted(n for _, n in claims) == [1] * len(run_ids)
    assert all(seqs == [0, 1] for seqs in _checkpoint_seqs(run_ids).values())


def test_worker_killed_mid_step_leaves_a_consistent_recoverable_run(
    db: str, own_broker: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    signals = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])
    # Given a worker whose pool child executes the second step of a run, which takes long
    worker = start_worker("-c", "1")
    run_id = enqueue_run("slow", {"sleep": 60})
    child = int(wait_for(lambda: signals.get(f"slow:started:{run_id}"), timeout=30))
    # Then only the worker holds the step's message: taken off its queue, and recorded nowhere
    # else in Redis (no acknowledgement emulation: no round trips to record and unrecord it)
    assert set(messages_held(own_broker).values()) == {0}, messages_held(own_broker)
    # When the whole worker (its main process and the child) is killed with SIGKILL in the
    # middle of that step, so that the message is gone with it
    worker.kill()
    wait_for(lambda: not _alive(child) and not _alive(worker.pid), timeout=10)
    # Then the run is still `running` under the dead process's lease, with only the checkpoints
    # of completed steps and no trace of the interrupted one
    run = get_run(run_id)
    assert run.state == "running"
    assert run.next_step == "crawl"
    assert run.checkpoints == 2
    assert run.flow_state == {"began": True}
    with transaction(readonly=True) as session:
        row = session.get(Run, run_id)
        assert row is not None and row.lease_expires_at is not None
        lease_end = row.lease_expires_at
        seqs = session.execute(
            select(Checkpoint.seq, Checkpoint.step)
            .where(Checkpoint.run_id == run_id)
            .order_by(Checkpoint.seq)
        ).all()
    assert [tuple(s) for s in seqs] == [(0, None), (1, "begin")]
    # And once the lease has expired, the reaper hands the run to a live worker, which
    # finishes it (this time the step is quick)
    wait_for(lambda: utcnow() > lease_end, timeout=10)
    assert set(messages_held(own_broker).values()) == {0}, messages_held(own_broker)
    start_worker("-c", "1")
    assert reap() == 1
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=30)
    assert get_run(run_id).flow_state == {"began": True, "crawled": True}


def test_a_killed_pool_child_s_run_is_requeued_and_its_task_delivered_again(
    db: str, own_broker: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker whose pool child is killed (SIGKILL) in the middle of a run's second
    # step, each time it runs it (as a step the OOM killer stops every time)
    worker = start_worker("-c", "1")
    run_id = enqueue_run("slow", {"die": True})
    # Then each time the worker's main process, which held the message (Redis keeps no copy)
    # and saw the child die, requeues the run and puts the task back on the queue: the step
    # runs again at once, not a lease later, until the run has lost its lease once more than
    # INTERLUDE_MAX_CLAIMS allows, and fails for good
    wait_for(lambda: get_run(run_id).state == "failed", timeout=120)
    received = re.findall(r"Task interlude\.run_step\[([0-9a-f-]+)\] received", worker.output())
    assert len(set(received)) == 1
    assert len(received) >= DEFAULT_MAX_CLAIMS + 1
    assert worker.output().count("WorkerLostError") >= DEFAULT_MAX_CLAIMS + 1
    run = get_run(run_id)
    assert run.error is not None
    assert run.error.startswith(f"lease lost {DEFAULT_MAX_CLAIMS + 1} times")
    assert run.flow_state == {"began": True}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child stays a zombie until its parent reaps it: that counts as dead.
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().split(") ", 1)[1][0] != "Z"
