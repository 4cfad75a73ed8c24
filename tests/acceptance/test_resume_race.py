"""Twenty processes race to release one interrupt: exactly one wins, the run continues once."""

from __future__ import annotations

import multiprocessing
import os
from collections import Counter
from typing import Any

from sqlalchemy import select

from models.db import transaction
from models.tables import Event
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for, wait_finished, wait_pending
from tests.services import WorkerProcess
from worker import add_actor, enqueue_run, list_resume_attempts

RACERS = 20
SAME_KEY_RACERS = 10
# The children fork from a server that imported interlude once: starting 20 is cheap, and each
# child is a fresh process (no state inherited from pytest) with its own database connection.
PRELOAD = ["worker", "tests.flows.interrupts", "tests.acceptance.test_resume_race"]


def _racer(
    database_url: str,
    contract: dict[str, Any],
    credential: str,
    barrier: Any,
    results: Any,
) -> None:
    """One responder process: connect, wait for the others, then submit at the same moment."""
    os.environ["INTERLUDE_DATABASE_URL"] = database_url
    from models.db import dispose_engines, get_engine
    from models.settings import reset_settings
    from worker import submit_resume

    reset_settings()
    dispose_engines()
    # Connect before the start line, so that the race is between resumes, not connects.
    with get_engine().connect() as conn:
        conn.exec_driver_sql("SELECT 1")
    barrier.wait(timeout=120)
    try:
        result = submit_resume(contract, credential)
        original = result.original_outcome.value if result.original_outcome else None
        results.put((os.getpid(), result.outcome.value, original))
    except BaseException as exc:  # the parent reports it; a child must always answer
        results.put((os.getpid(), "raised", repr(exc)))


def _race(database_url: str, contracts: list[dict[str, Any]], credential: str) -> list[Any]:
    """Submit each contract from its own process, all released at once by a barrier."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(PRELOAD)
    barrier = context.Barrier(len(contracts))
    results = context.Queue()
    racers = [
        context.Process(target=_racer, args=(database_url, contract, credential, barrier, results))
        for contract in contracts
    ]
    for racer in racers:
        racer.start()
    answers = [results.get(timeout=180) for _ in racers]
    for racer in racers:
        racer.join(30)
    assert len({pid for pid, _, _ in answers}) == len(contracts)
    return answers


def _accepts(run_id: str) -> int:
    with transaction(readonly=True) as session:
        return len(
            session.execute(
                select(Event.id).where(Event.run_id == run_id, Event.trigger == "accept_resume")
            ).all()
        )


def test_twenty_processes_race_for_one_interrupt(
    db: str, database_url: str, shared_worker: WorkerProcess
) -> None:
    # Given a run waiting on one approval, and twenty responders with their own keys
    credential = add_actor("alice", ["approver"])
    run_id = enqueue_run("raced", {})
    interrupt = wait_pending(run_id)
    contracts = [contract_for(interrupt, "alice", key=f"racer-{n}") for n in range(RACERS)]
    # When all of them submit at the same moment
    answers = _race(database_url, contracts, credential)
    # Then exactly one was accepted and every other one was refused as stale
    outcomes = Counter(outcome for _, outcome, _ in answers)
    assert outcomes == {"accepted": 1, "stale": RACERS - 1}, answers
    # And all twenty attempts are on record, each with its own key
    attempts = list_resume_attempts(interrupt_id=interrupt.id)
    assert len(attempts) == RACERS
    assert {a.idempotency_key for a in attempts} == {f"racer-{n}" for n in range(RACERS)}
    assert Counter(a.outcome for a in attempts) == outcomes
    # And the run continued once: the step after the interrupt ran exactly one time
    assert wait_finished(run_id) == "succeeded"
    assert int(scratch_redis().get(f"raced:after:{run_id}") or 0) == 1
    assert _accepts(run_id) == 1


def test_one_contract_submitted_by_many_processes_at_once_is_one_resume(
    db: str, database_url: str, shared_worker: WorkerProcess
) -> None:
    # Given one contract, retried by ten processes at the same moment (a client's retry storm)
    credential = add_actor("alice", ["approver"])
    run_id = enqueue_run("raced", {})
    interrupt = wait_pending(run_id)
    contract = contract_for(interrupt, "alice", key="the-key")
    answers = _race(database_url, [contract] * SAME_KEY_RACERS, credential)
    # Then one is accepted and every other one is a duplicate of it, all on record
    outcomes = Counter((outcome, original) for _, outcome, original in answers)
    assert outcomes == {
        ("accepted", None): 1,
        ("duplicate", "accepted"): SAME_KEY_RACERS - 1,
    }, answers
    attempts = list_resume_attempts(interrupt_id=interrupt.id)
    assert Counter(a.outcome for a in attempts) == {
        "accepted": 1,
        "duplicate": SAME_KEY_RACERS - 1,
    }
    assert wait_finished(run_id) == "succeeded"
    assert int(scratch_redis().get(f"raced:after:{run_id}") or 0) == 1
    assert _accepts(run_id) == 1
