"""Waiting runs cost rows, not workers: one worker slot serves fifty waiting runs and more."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import func, select

from models.db import transaction
from models.tables import Event, Run
from tests.acceptance.brokers import messages_held
from tests.resumes import contract_for, wait_finished, wait_pending
from tests.services import WorkerProcess, forget_connections, wait_for
from worker import add_actor, app, enqueue_run, list_interrupts, submit_resume
from worker.engine.tasknames import QUEUE_RESUMES, QUEUE_STEPS

WAITING_RUNS = 50
QUEUES = (QUEUE_STEPS, QUEUE_RESUMES)
INSPECT_TIMEOUT = 10.0


def _node(worker: WorkerProcess) -> str:
    # conftest names workers ``<name>@%h``; Celery expands %h to the full host name.
    return f"{worker.name}@{socket.gethostname()}"


@contextmanager
def only(node: str) -> Iterator[None]:
    """Let ``node`` be the only consumer of the run queues of this broker while the block runs.

    Other workers of this test session (the shared one) stop consuming through the remote
    control API and resume afterwards, so that what this test observes is one worker's doing.
    """
    replies = app.control.ping(timeout=3.0) or []
    others = [name for reply in replies for name in reply if name != node]
    for queue in QUEUES:
        if others:
            app.control.cancel_consumer(queue, destination=others, reply=True, timeout=5.0)
    try:
        yield
    finally:
        for queue in QUEUES:
            if others:
                app.control.add_consumer(queue, destination=others, reply=True, timeout=5.0)


def _count(state: str, flow: str) -> int:
    with transaction(readonly=True) as session:
        return int(
            session.execute(
                select(func.count()).where(Run.state == state, Run.flow_name == flow)
            ).scalar_one()
        )


def _inspect(node: str, what: str) -> Any:
    inspector = app.control.inspect(destination=[node], timeout=INSPECT_TIMEOUT)
    replies = getattr(inspector, what)()
    assert replies and node in replies, f"{node} did not answer inspect {what}: {replies!r}"
    return replies[node]


def _answers(node: str) -> Any:
    try:
        replies = app.control.inspect(destination=[node], timeout=INSPECT_TIMEOUT / 2).ping()
    except OSError:
        # A pooled connection to a broker node that restarted since (the outage tests restart
        # the session's RabbitMQ node): drop it, and the next try connects again.
        forget_connections()
        return None
    return (replies or {}).get(node)


def test_fifty_waiting_runs_hold_no_worker_slot(
    db: str, start_worker: Callable[..., WorkerProcess], broker_url: str
) -> None:
    # Given one worker process with a single pool slot, answering the remote control API
    worker = start_worker("-c", "1", INTERLUDE_BROKER_URL=broker_url)
    node = _node(worker)
    # A worker that said "ready." may take a moment more to answer its first broadcast when
    # the machine is busy: ask until it does.
    assert wait_for(lambda: _answers(node), timeout=60) == {"ok": "pong"}
    pool = _inspect(node, "stats")["pool"]
    assert pool["max-concurrency"] == 1
    (slot_pid,) = pool["processes"]
    with only(node):
        # When fifty runs reach an approval and wait
        run_ids = [enqueue_run("approval", {"env": "prod", "n": n}) for n in range(WAITING_RUNS)]
        wait_for(lambda: _count("waiting", "approval") == WAITING_RUNS, timeout=120, interval=0.2)
        # Then none of them holds a task: nothing active, reserved or scheduled on the worker,
        # and nothing left in the broker (every delivery was acknowledged)
        wait_for(lambda: _inspect(node, "active") == [], timeout=10)
        assert _inspect(node, "reserved") == []
        assert _inspect(node, "scheduled") == []
        assert set(messages_held(broker_url).values()) == {0}, messages_held(broker_url)
        assert len(list_interrupts(status="pending", kind="approval")) == WAITING_RUNS
        # When a run of another flow is started, Then it completes at once on that same slot
        quick = enqueue_run("quick", {})
        assert wait_finished(quick, timeout=30) == "succeeded"
        with transaction(readonly=True) as session:
            claimed_by = session.execute(
                select(Event.actor).where(Event.run_id == quick, Event.trigger == "claim")
            ).scalar_one()
        assert claimed_by.endswith(f":{slot_pid}"), (claimed_by, slot_pid)
        # And the waiting runs are still there, each ready to be resumed on the same worker
        assert _count("waiting", "approval") == WAITING_RUNS
        credential = add_actor("alice", ["approver"])
        interrupt = wait_pending(run_ids[0])
        assert submit_resume(contract_for(interrupt, "alice"), credential).accepted
        assert wait_finished(run_ids[0], timeout=30) == "succeeded"
        assert _count("waiting", "approval") == WAITING_RUNS - 1
        processed = _inspect(node, "stats")["total"]
        assert processed.get("interlude.resume_run") == 1
        assert processed.get("interlude.run_step", 0) >= WAITING_RUNS + 1
