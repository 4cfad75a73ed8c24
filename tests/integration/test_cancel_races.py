"""Cancelling a run while another transaction supersedes its interrupt with a new pending one.

A sweep's escalation and a renewed review in the gateway hold the interrupt they supersede
until they commit its pending successor. On PostgreSQL the cancel's locked read of the pending
interrupts waits for them and then drops the superseded one, while its snapshot predates the
successor. The interleavings are forced: the superseding transaction is held open right after
``supersede`` until the cancel is seen waiting on a row lock (``pg_stat_activity``). SQLite
serialises every writer, so there the cancel simply comes after the escalation; the outcome
must be the same.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import text

from models import interrupts as interrupt_store
from models import successors as successor_store
from models.db import transaction, utcnow
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for, drain_pending
from tests.services import wait_for
from worker import add_actor, cancel_run, enqueue_run, get_run, submit_resume
from worker.engine.sweeps import sweep_expired
from worker.interrupts import list_interrupts
from worker.testing import TaskRecorder

# Generous bounds on waits that end as soon as their condition holds: never a measure of speed.
PATIENCE = 60.0


class Gate:
    """Holds a thread at one point until the test lets it go."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def hold(self) -> None:
        self.reached.set()
        assert self.release.wait(PATIENCE), "the test never released the gate"

    def wait_reached(self) -> None:
        assert self.reached.wait(PATIENCE), "the thread never reached the gate"


class Runner(threading.Thread):
    """A thread that keeps what its work returned, or raised."""

    def __init__(self, name: str, work: Callable[[], Any]) -> None:
        super().__init__(name=name, daemon=True)
        self.work = work
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self.result = self.work()
        except BaseException as exc:  # reported by finish()
            self.error = exc

    def finish(self) -> Any:
        self.join(PATIENCE)
        assert not self.is_alive(), f"{self.name} is still running"
        if self.error is not None:
            raise self.error
        return self.result


@pytest.fixture()
def held_after_supersede(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Gate]]:
    """``supersede`` (a renewed review) or ``supersede_all`` (a sweep's escalations) in a
    thread named after one of the returned gates holds there, with the old interrupt
    superseded and its successor inserted, before its transaction commits."""
    gates: dict[str, Gate] = {}

    def held(real: Any) -> Any:
        def superseding(*args: Any, **kwargs: Any) -> Any:
            done = real(*args, **kwargs)
            gate = gates.get(threading.current_thread().name)
            if gate is not None:
                gate.hold()
            return done

        return superseding

    monkeypatch.setattr(interrupt_store, "supersede", held(interrupt_store.supersede))
    monkeypatch.setattr(successor_store, "supersede_all", held(successor_store.supersede_all))
    yield gates


def _waits_on_a_lock(backend: str, thread: threading.Thread) -> None:
    """Return once ``thread`` waits on a row lock (PostgreSQL) or has finished.

    On SQLite a writer waits for the database's write lock before its first statement; it
    then takes it whenever the other writer commits, so there is nothing to wait for here.
    """
    if backend != "postgresql":
        return

    def waiting() -> bool:
        with transaction(readonly=True) as session:
            found = session.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                    "AND wait_event_type = 'Lock' AND pid <> pg_backend_pid()"
                )
            ).scalar_one()
        return bool(found) or not thread.is_alive()

    wait_for(waiting, timeout=PATIENCE)


def _statuses(run_id: str) -> list[tuple[int, str, str | None]]:
    return [
        (i.escalation_level, i.status, i.resolved_by)
        for i in sorted(list_interrupts(run_id=run_id), key=lambda i: i.created_at)
    ]


def _escalated_run(tasks: TaskRecorder, max_escalations: int) -> str:
    run_id = enqueue_run(
        "expiring",
        {
            "policy": "escalate",
            "expires_in": 60,
            "escalation_expires_in": 60,
            "max_escalations": max_escalations,
        },
    )
    tasks.drain()
    assert get_run(run_id).state == "waiting"
    return run_id


def test_a_cancel_during_an_escalation_closes_the_escalated_interrupt(
    tasks: TaskRecorder, backend: str, held_after_supersede: dict[str, Gate]
) -> None:
    # Given a waiting run whose interrupt escalates when its deadline passes
    carol = add_actor("carol", ["operator"])
    run_id = _escalated_run(tasks, max_escalations=1)
    # When the sweep has superseded it with the manager's interrupt, not yet committed,
    gate = held_after_supersede["sweep"] = Gate()
    later = utcnow() + timedelta(minutes=5)
    sweep = Runner("sweep", lambda: sweep_expired(now=later))
    sweep.start()
    gate.wait_reached()
    # and an operator cancels the run meanwhile, waiting for the sweep's row
    cancel = Runner("cancel", lambda: cancel_run(run_id, actor="carol", credential=carol))
    cancel.start()
    _waits_on_a_lock(backend, cancel)
    gate.release.set()
    assert sweep.finish() == 1
    assert cancel.finish() == "human:carol"
    # Then the run is cancelled and the escalated interrupt closed with it: none is left pending
    assert get_run(run_id).state == "cancelled"
    assert _statuses(run_id) == [
        (0, "superseded", "system:expiry"),
        (1, "cancelled", "human:carol"),
    ]
    assert list_interrupts(run_id=run_id, status="pending") == []


def test_a_cancel_during_a_renewed_review_closes_the_renewed_interrupt(
    tasks: TaskRecorder, backend: str, held_after_supersede: dict[str, Gate]
) -> None:
    # Given a price approval raised at a price that has changed since
    carol, alice = add_actor("carol", ["operator"]), add_actor("alice", ["approver"])
    redis = scratch_redis()
    redis.set("price:sku-race", "10")
    run_id = enqueue_run("priced", {"sku": "sku-race"})
    waiting = drain_pending(run_id)
    redis.set("price:sku-race", "12")
    # When alice's answer has superseded it with a renewed review, not yet committed,
    gate = held_after_supersede["resume"] = Gate()
    resume = Runner("resume", lambda: submit_resume(contract_for(waiting, "alice"), alice))
    resume.start()
    gate.wait_reached()
    # and an operator cancels the run meanwhile, waiting for the gateway's row
    cancel = Runner("cancel", lambda: cancel_run(run_id, actor="carol", credential=carol))
    cancel.start()
    _waits_on_a_lock(backend, cancel)
    gate.release.set()
    assert resume.finish().outcome == "renewed_review_required"
    assert cancel.finish() == "human:carol"
    # Then the renewed review is closed with the run
    assert get_run(run_id).state == "cancelled"
    assert [(s, by) for _, s, by in _statuses(run_id)] == [
        ("superseded", "system:revalidation"),
        ("cancelled", "human:carol"),
    ]
    assert list_interrupts(run_id=run_id, status="pending") == []


def test_a_cancel_overtaken_by_two_escalations_closes_the_last(
    tasks: TaskRecorder,
    backend: str,
    held_after_supersede: dict[str, Gate],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The successor the cancel finds is superseded in turn before the cancel holds it."""
    if backend != "postgresql":
        pytest.skip("SQLite serialises writers: a cancel held in its transaction blocks both")
    # Given a run whose interrupt escalates twice
    carol = add_actor("carol", ["operator"])
    run_id = _escalated_run(tasks, max_escalations=2)
    # and a cancel that pauses right after its first read of the run's pending interrupts
    after_read = Gate()
    real_pending = interrupt_store.pending_of_run
    reads = 0

    def pending_of_run(*args: Any, **kwargs: Any) -> Any:
        nonlocal reads
        found = real_pending(*args, **kwargs)
        if threading.current_thread().name == "cancel":
            reads += 1
            if reads == 1:
                after_read.hold()
        return found

    monkeypatch.setattr(interrupt_store, "pending_of_run", pending_of_run)
    # When the first escalation commits while the cancel waits for its row
    first = held_after_supersede["sweep-1"] = Gate()
    sweep_1 = Runner("sweep-1", lambda: sweep_expired(now=utcnow() + timedelta(minutes=5)))
    sweep_1.start()
    first.wait_reached()
    cancel = Runner("cancel", lambda: cancel_run(run_id, actor="carol", credential=carol))
    cancel.start()
    _waits_on_a_lock(backend, cancel)
    first.release.set()
    assert sweep_1.finish() == 1
    after_read.wait_reached()
    # and a second one supersedes the successor before the cancel takes it
    second = held_after_supersede["sweep-2"] = Gate()
    sweep_2 = Runner("sweep-2", lambda: sweep_expired(now=utcnow() + timedelta(hours=1)))
    sweep_2.start()
    second.wait_reached()
    after_read.release.set()
    _waits_on_a_lock(backend, cancel)
    second.release.set()
    assert sweep_2.finish() == 1
    assert cancel.finish() == "human:carol"
    # Then the run is cancelled and the interrupt of the second escalation closed with it
    assert get_run(run_id).state == "cancelled"
    assert _statuses(run_id) == [
        (0, "superseded", "system:expiry"),
        (1, "superseded", "system:expiry"),
        (2, "cancelled", "human:carol"),
    ]
    assert list_interrupts(run_id=run_id, status="pending") == []
