"""The broker stopped and PostgreSQL restarted under 100 runs: every run finishes, once.

Both outages hit private servers started for the test (never the machine's shared ones), and
each test runs with Redis and with RabbitMQ as the broker. Redis runs without persistence, so
its restart loses every message it held: the runs rows are the outbox and our reaper
republishes what was lost. RabbitMQ keeps its durable queues across the restart.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from sqlalchemy import Engine, create_engine, func, select

from models.migrate import upgrade
from models.tables import Checkpoint, Effect, Event, Run
from tests.acceptance.brokers import BROKERS, rabbit_for
from tests.acceptance.private_services import PrivatePostgres, PrivateRabbit, PrivateRedis
from tests.flows.effects import applied
from tests.services import ROOT, WorkerProcess, enqueue_elsewhere, runs_in_state, wait_for

RUNS = 100
OUTAGE_SECONDS = 3.0
# Each step waits this long, so that the runs take longer than enqueueing them (about 7.5 s on
# a worker with two slots): the outage then comes while most are still to run, even when
# the worker is fast (the runs are enqueued while it is already consuming; the test checks
# that it came mid-way).
STEP_SECONDS = 0.05
# Short leases and a quick reaper, so that recovery is a matter of seconds.
RECOVERY_ENV = {
    "INTERLUDE_LEASE_SECONDS": "5",
    # Long enough that runs merely waiting in a slow broker's queue are not all sent again at
    # every reaper pass (each copy costs the worker a delivery), short enough to recover the
    # messages a restarted Redis lost well within the test's time.
    "INTERLUDE_REDISPATCH_AFTER": "8",
    "INTERLUDE_REAP_INTERVAL": "0.5",
}


@pytest.fixture(params=BROKERS)
def private_broker(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[PrivateRedis | PrivateRabbit]:
    """A broker of this test's own, which it may stop: a Redis, or the session's RabbitMQ node."""
    if request.param == "rabbitmq":
        node = rabbit_for(request)
        yield node
        if not node.running:  # the test stopped it mid-way and failed before restarting it
            node.start()
        return
    server = PrivateRedis(tmp_path).start()
    yield server
    server.stop()


def _enqueue(env: dict[str, str], count: int) -> list[str]:
    """Start runs from another process, which publishes to the private broker."""
    return enqueue_elsewhere(env, count, STEP_SECONDS)


def _succeeded(engine: Engine, run_ids: list[str]) -> int:
    try:
        return runs_in_state(engine, run_ids, "succeeded")
    except Exception:
        return -1  # the database is the one restarting


def _all_succeeded(
    engine: Engine, run_ids: list[str], processes: list[WorkerProcess], timeout: float = 120.0
) -> None:
    """Wait for every run to succeed; on a timeout, say where the others stand and why.

    A worker or beat that exits fails the wait at once: nothing would finish the runs.
    """

    def done() -> bool:
        for process in processes:
            code = process.proc.poll() if process.proc else None
            if code is not None:
                raise AssertionError(f"{process.name} exited with code {code} (its log follows)")
        return _succeeded(engine, run_ids) == RUNS

    try:
        wait_for(done, timeout=timeout, interval=0.5)
    except AssertionError as exc:
        raise AssertionError(f"{exc}\n{_where_runs_stand(engine, run_ids)}") from None


def _where_runs_stand(engine: Engine, run_ids: list[str]) -> str:
    """Runs by state, then the first unfinished ones: their row's clocks and their timeline."""
    with engine.connect() as conn:
        rows = conn.execute(
            select(
                Run.id,
                Run.state,
                Run.next_step,
                Run.dispatched_at,
                Run.updated_at,
                Run.lease_owner,
                Run.lease_expires_at,
            ).where(Run.id.in_(run_ids))
        ).all()
        lines = [f"runs by state: {dict(Counter(row.state for row in rows))}"]
        for row in [r for r in rows if r.state != "succeeded"][:5]:
            lines.append(
                f"{row.id} {row.state} next={row.next_step} dispatched={row.dispatched_at} "
                f"updated={row.updated_at} lease={row.lease_owner} until {row.lease_expires_at}"
            )
            events = conn.execute(
                select(Event.at, Event.trigger, Event.actor, Event.to_state)
                .where(Event.run_id == row.id)
                .order_by(Event.id)
            ).all()
            lines += [f"    {e.at} {e.trigger} by {e.actor} -> {e.to_state}" for e in events]
    return "\n".join(lines)


def _assert_each_run_finished_once(engine: Engine, run_ids: list[str]) -> None:
    with engine.connect() as conn:
        states = dict(conn.execute(select(Run.id, Run.state).where(Run.id.in_(run_ids))).all())
        seqs: dict[str, list[int]] = {run_id: [] for run_id in run_ids}
        for run_id, seq in conn.execute(
            select(Checkpoint.run_id, Checkpoint.seq)
            .where(Checkpoint.run_id.in_(run_ids))
            .order_by(Checkpoint.run_id, Checkpoint.seq)
        ):
            seqs[run_id].append(seq)
        commits = dict(
            conn.execute(
                select(Event.run_id, func.count())
                .where(Event.run_id.in_(run_ids), Event.trigger.in_(["advance", "complete"]))
                .group_by(Event.run_id)
            ).all()
        )
        effects = dict(
            conn.execute(
                select(Effect.run_id, Effect.status).where(Effect.run_id.in_(run_ids))
            ).all()
        )
        outputs = dict(conn.execute(select(Run.id, Run.output).where(Run.id.in_(run_ids))).all())
    # None lost: every run is there and succeeded
    assert len(states) == RUNS
    assert set(states.values()) == {"succeeded"}
    for run_id in run_ids:
        # None duplicated: checkpoints 0..3 once each, three step commits, the effect once
        assert seqs[run_id] == [0, 1, 2, 3], run_id
        assert commits[run_id] == 3, run_id
        assert effects[run_id] == "applied", run_id
        assert applied(run_id) == 1, run_id
        assert outputs[run_id]["trail"] == ["one", "two", "three"]


def _outage_mid_way(
    engine: Engine, run_ids: list[str], stop: Callable[[], None], start: Callable[[], None]
) -> None:
    """Wait until the runs are part-way done, take the service down for a while, bring it up."""
    wait_for(lambda: _succeeded(engine, run_ids) >= RUNS // 10, timeout=60)
    stop()
    done_at_outage = _succeeded(engine, run_ids)
    time.sleep(OUTAGE_SECONDS)
    start()
    # The outage really was mid-way (the check is meaningless if everything was done)
    assert done_at_outage < RUNS, "every run finished before the outage"


def test_broker_stopped_mid_way_through_100_runs(
    db: str,
    start_worker: Callable[..., WorkerProcess],
    private_broker: PrivateRedis | PrivateRabbit,
    tmp_path: Path,
) -> None:
    env = {"INTERLUDE_BROKER_URL": private_broker.url(), **RECOVERY_ENV}
    processes = [
        start_worker("-c", "2", **env),
        start_worker("-s", str(tmp_path / "beat-schedule"), kind="beat", **env),
    ]
    run_ids = _enqueue(dict(os.environ, **env), RUNS)
    engine = create_engine(db)
    try:
        # When the broker disappears for a few seconds while the runs are part-way through
        _outage_mid_way(engine, run_ids, private_broker.stop, private_broker.start)
        # Then every run finishes, none lost and none done twice
        _all_succeeded(engine, run_ids, processes)
        _assert_each_run_finished_once(engine, run_ids)
    finally:
        engine.dispose()


def test_postgresql_restarted_mid_way_through_100_runs(
    logs_dir: Path, private_broker: PrivateRedis | PrivateRabbit, tmp_path: Path
) -> None:
    server = PrivatePostgres().init()
    workers: list[WorkerProcess] = []
    try:
        server.start()
        upgrade(server.url)
        env = dict(
            os.environ,
            INTERLUDE_DATABASE_URL=server.url,
            INTERLUDE_BROKER_URL=private_broker.url(),
            **RECOVERY_ENV,
        )
        workers.append(WorkerProcess(env, logs_dir, "-c", "2").start())
        workers.append(
            WorkerProcess(env, logs_dir, "-s", str(tmp_path / "beat-schedule"), kind="beat").start()
        )
        run_ids = _enqueue(env, RUNS)
        engine = create_engine(server.url, pool_pre_ping=True)
        try:
            # When PostgreSQL goes down for a few seconds while the runs are part-way through
            _outage_mid_way(engine, run_ids, server.stop, server.start)
            # Then every run finishes, none lost and none done twice
            _all_succeeded(engine, run_ids, workers)
            _assert_each_run_finished_once(engine, run_ids)
        finally:
            engine.dispose()
    finally:
        for worker in workers:
            worker.kill()
        server.remove()


def test_steps_caught_by_a_postgresql_restart_are_given_back_at_once_not_after_their_lease(
    logs_dir: Path, tmp_path: Path
) -> None:
    # Given a worker with long leases and no beat (so no reaper), and runs whose steps take a
    # while, on a PostgreSQL and a Redis of the test's own
    broker = PrivateRedis(tmp_path).start()
    server = PrivatePostgres().init()
    worker: WorkerProcess | None = None
    try:
        server.start()
        upgrade(server.url)
        env = dict(
            os.environ,
            INTERLUDE_DATABASE_URL=server.url,
            INTERLUDE_BROKER_URL=broker.url(),
            INTERLUDE_LEASE_SECONDS="120",
        )
        worker = WorkerProcess(env, logs_dir, "-c", "2").start()
        code = (
            "import json\nfrom worker import enqueue_run\n"
            "print(json.dumps([enqueue_run('effect_steady', {'sleep': 1.5}) for _ in range(2)]))"
        )
        done = subprocess.run(
            [sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, timeout=60
        )
        assert done.returncode == 0, done.stderr.decode()[-3000:]
        run_ids = json.loads(done.stdout.decode().strip().splitlines()[-1])
        engine = create_engine(server.url, pool_pre_ping=True)
        try:
            # When PostgreSQL restarts while both runs are inside a step
            wait_for(lambda: _claims(engine, run_ids) >= 2, timeout=30)
            server.stop()
            server.start()
            # Then each step that met the restart gave its run back (no step failure, no
            # lease to wait out): both runs finish well within one lease, each effect once
            wait_for(lambda: _succeeded(engine, run_ids) == 2, timeout=30, interval=0.2)
            for run_id in run_ids:
                assert applied(run_id) == 1
            assert "given back to be executed again at once" in worker.output()
            assert "Traceback" not in worker.output()
        finally:
            engine.dispose()
    finally:
        if worker is not None:
            worker.kill()
        server.remove()
        broker.stop()


def _claims(engine: Engine, run_ids: list[str]) -> int:
    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count())
                .select_from(Event)
                .where(Event.run_id.in_(run_ids), Event.trigger == "claim")
            ).scalar_one()
        )
