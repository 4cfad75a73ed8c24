"""Expiry policies applied by the sweep, with steps and resumes executed in-process (``drain``)."""

from __future__ import annotations

import os
import threading
from datetime import timedelta
from typing import Any

import redis
from sqlalchemy import update

from models.contracts import InterruptView
from models.db import transaction, utcnow
from models.tables import Interrupt
from tests.flows.expiry import NOTIFIED
from tests.resumes import contract_for
from tests.services import wait_for
from worker import (
    add_actor,
    enqueue_run,
    get_interrupt,
    get_run,
    list_interrupts,
    list_resume_attempts,
    submit_resume,
)
from worker.engine.sweeps import sweep_expired
from worker.runs import list_events
from worker.testing import TaskRecorder, drain

SYSTEM = "system:expiry"


def _waiting(policy: str, expires_in: float = 1.0, **extra: Any) -> tuple[str, InterruptView]:
    """A run of the ``expiring`` flow, executed until it waits."""
    run_id = enqueue_run("expiring", {"policy": policy, "expires_in": expires_in, **extra})
    drain()
    assert get_run(run_id).state == "waiting"
    (interrupt,) = get_run(run_id).pending_interrupts
    return run_id, interrupt


def _sweep_until(count: int) -> int:
    """Sweep (as beat would) until ``count`` interrupts were handled by one sweep."""
    handled: list[int] = []

    def swept() -> bool:
        handled.append(sweep_expired())
        return handled[-1] >= count

    wait_for(swept, timeout=15, interval=0.2)
    return handled[-1]


def _contract(interrupt: InterruptView, actor: str, **overrides: Any) -> dict[str, Any]:
    return contract_for(interrupt, actor, input={"choice": f"picked by {actor}"}, **overrides)


def _transitions(run_id: str) -> list[tuple[str, str, str | None]]:
    return [(e.trigger, e.actor, e.to_state) for e in list_events(run_id) if e.to_state]


def _finished(run_id: str) -> bool:
    return get_run(run_id).state in {"succeeded", "failed", "cancelled", "expired"}


def test_expire_policy_ends_the_run_and_a_late_resume_is_refused(tasks: TaskRecorder) -> None:
    # Given a run waiting on an interrupt with a one-second deadline and the expire policy
    credential = add_actor("alice", ["approver"])
    run_id, interrupt = _waiting("expire")
    # When the deadline passes but no sweep has run yet, a resume is refused as expired
    wait_for(lambda: utcnow() > interrupt.deadline)
    early = submit_resume(_contract(interrupt, "alice"), credential)
    assert early.outcome == "expired", early.reason
    # When the sweep runs
    assert _sweep_until(1) == 1
    # Then the interrupt and the run are expired, by system:expiry
    expired = get_interrupt(interrupt.id)
    assert (expired.status, expired.resolved_by) == ("expired", SYSTEM)
    run = get_run(run_id)
    assert run.state == "expired"
    assert run.error is not None and "'choose' passed its deadline" in run.error
    assert _transitions(run_id)[-1] == ("expire", SYSTEM, "expired")
    # And a resume arriving after the sweep is refused as stale, and recorded
    late = submit_resume(_contract(interrupt, "alice"), credential)
    assert late.outcome == "stale" and "interrupt is expired" in late.reason
    outcomes = [a.outcome for a in list_resume_attempts(interrupt_id=interrupt.id)]
    assert outcomes == ["stale", "expired"]  # newest first
    # And nothing more is due
    assert sweep_expired(now=utcnow() + timedelta(days=30)) == 0


def test_cancel_policy_cancels_the_run(tasks: TaskRecorder) -> None:
    run_id, interrupt = _waiting("cancel")
    assert _sweep_until(1) == 1
    assert get_interrupt(interrupt.id).status == "expired"
    assert get_run(run_id).state == "cancelled"
    assert _transitions(run_id)[-1] == ("cancel", SYSTEM, "cancelled")


def test_escalate_policy_hands_the_wait_to_the_escalation_roles(tasks: TaskRecorder) -> None:
    notified = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"], decode_responses=True)
    alice = add_actor("alice", ["approver"])
    boss = add_actor("boss", ["manager"])
    run_id, interrupt = _waiting("escalate", escalation_expires_in=3600)
    # When the deadline passes and the sweep runs
    assert _sweep_until(1) == 1
    # Then a new interrupt for the manager role supersedes the old one
    old = get_interrupt(interrupt.id)
    assert (old.status, old.resolved_by) == ("superseded", SYSTEM)
    assert old.superseded_by is not None
    assert [i.id for i in list_interrupts(status="superseded", run_id=run_id)] == [old.id]
    new = get_interrupt(old.superseded_by)
    assert (new.status, new.roles, new.escalation_level) == ("pending", ["manager"], 1)
    assert new.supersedes == old.id
    assert (new.checkpoint_id, new.state_version) == (old.checkpoint_id, old.state_version)
    assert (new.evidence_hash, new.scope, new.schema_name) == (
        old.evidence_hash,
        old.scope,
        old.schema_name,
    )
    assert new.deadline > utcnow() + timedelta(minutes=50)
    assert get_run(run_id).state == "waiting"
    escalations = [e for e in list_events(run_id) if e.trigger == "escalate"]
    assert [(e.actor, e.detail["new_interrupt_id"]) for e in escalations] == [(SYSTEM, new.id)]
    # And the flow's notifiers hear about the escalated interrupt, in their own tasks
    assert [t.notice.interrupt_id for t in tasks.pending if t.notice is not None] == [new.id]
    drain()
    assert f"{run_id}:{new.id}:1:manager" in notified.lrange(NOTIFIED, 0, -1)
    # And only the escalation role may answer it now
    denied = submit_resume(_contract(new, "alice"), alice)
    assert denied.outcome == "denied", denied.reason
    accepted = submit_resume(_contract(new, "boss"), boss)
    assert accepted.outcome == "accepted", accepted.reason
    drain()
    assert _finished(run_id)
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output["choice"] == "picked by boss"


def test_escalation_limit_ends_in_expire(tasks: TaskRecorder) -> None:
    # Given an interrupt that may be escalated twice, each time for half a second
    run_id, _ = _waiting("escalate", escalation_expires_in=0.5, max_escalations=2)
    # When three sweeps find it due in turn
    for _ in range(3):
        _sweep_until(1)
    # Then it was escalated twice and then expired, and the run with it
    chain = list_interrupts(run_id=run_id)
    assert [(i.escalation_level, i.status) for i in chain] == [
        (0, "superseded"),
        (1, "superseded"),
        (2, "expired"),
    ]
    assert [i.supersedes for i in chain] == [None, chain[0].id, chain[1].id]
    run = get_run(run_id)
    assert run.state == "expired"
    events = [(e.trigger, e.actor) for e in list_events(run_id) if e.actor == SYSTEM]
    assert events == [("escalate", SYSTEM), ("escalate", SYSTEM), ("expire", SYSTEM)]
    last = next(e for e in list_events(run_id) if e.trigger == "expire")
    assert last.detail["note"] == "escalation limit reached"


def test_default_policy_resumes_with_the_default_input(tasks: TaskRecorder) -> None:
    run_id, interrupt = _waiting("default")
    assert _sweep_until(1) == 1
    # Then the run continues and the step sees the declared default as the resume value
    drain()
    assert _finished(run_id)
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output == {"choice": "fallback", "answered_by": SYSTEM, "recorded": True}
    resolved = get_interrupt(interrupt.id)
    assert (resolved.status, resolved.resolved_by) == ("resolved", SYSTEM)
    assert resolved.resume_input == {"choice": "fallback"}
    # And it was recorded like any resume, under the system's idempotency key
    (attempt,) = list_resume_attempts(interrupt_id=interrupt.id)
    assert (attempt.outcome, attempt.actor_id) == ("accepted", SYSTEM)
    assert attempt.idempotency_key == f"{SYSTEM}:{interrupt.id}"
    accepts = [(e.actor, e.to_state) for e in list_events(run_id) if e.trigger == "accept_resume"]
    assert accepts == [(f"service:{SYSTEM}", "resuming")]


def test_a_resume_accepted_before_the_sweep_is_not_expired(tasks: TaskRecorder) -> None:
    credential = add_actor("alice", ["approver"])
    run_id, interrupt = _waiting("expire", expires_in=60)
    accepted = submit_resume(_contract(interrupt, "alice"), credential)
    assert accepted.outcome == "accepted", accepted.reason
    # When a sweep runs at a time the deadline would have passed
    assert sweep_expired(now=utcnow() + timedelta(hours=1)) == 0
    # Then the interrupt stays resolved by its responder and the run finishes normally
    drain()
    assert _finished(run_id)
    assert get_run(run_id).state == "succeeded"
    assert get_interrupt(interrupt.id).resolved_by == "alice"
    assert not [e for e in list_events(run_id) if e.actor == SYSTEM]


def test_a_contract_past_its_expires_at_is_refused_and_recorded(tasks: TaskRecorder) -> None:
    credential = add_actor("alice", ["approver"])
    run_id, interrupt = _waiting("expire", expires_in=3600)
    stale = (utcnow() - timedelta(seconds=1)).isoformat()
    result = submit_resume(_contract(interrupt, "alice", expires_at=stale), credential)
    assert result.outcome == "expired" and "the contract expired" in result.reason
    (attempt,) = list_resume_attempts(interrupt_id=interrupt.id)
    assert attempt.outcome == "expired" and attempt.payload["expires_at"] == stale
    assert get_interrupt(interrupt.id).status == "pending"
    assert get_run(run_id).state == "waiting"


def test_expired_interrupts_are_an_operator_queue_oldest_first(tasks: TaskRecorder) -> None:
    runs = [_waiting("expire")[0] for _ in range(3)]
    _sweep_until(1)
    wait_for(lambda: sweep_expired() == 0 and len(list_interrupts(status="expired")) == 3)
    queue = list_interrupts(status="expired")
    assert [i.run_id for i in queue] == runs
    assert [i.created_at for i in queue] == sorted(i.created_at for i in queue)


def test_batches_go_on_and_rows_that_cannot_be_handled_do_not_stop_them(
    tasks: TaskRecorder,
) -> None:
    # Given six due interrupts: one whose default input this process cannot validate (it
    # does not know the schema version) and one whose escalation record is broken
    waiting = [_waiting("expire", expires_in=60) for _ in range(4)]
    unknown_run, unknown = _waiting("default", expires_in=60)
    broken_run, broken = _waiting("escalate", expires_in=60)
    with transaction() as session:
        session.execute(
            update(Interrupt).where(Interrupt.id == unknown.id).values(schema_version=99)
        )
        session.execute(
            update(Interrupt).where(Interrupt.id == broken.id).values(escalation={"max": 1})
        )
    # When one sweep runs with batches of two
    later = utcnow() + timedelta(hours=1)
    assert sweep_expired(now=later, batch=2) == 4
    # Then the four others were expired and the two bad ones stay pending, their runs untouched
    assert {get_run(r).state for r, _ in waiting} == {"expired"}
    for run_id, interrupt in ((unknown_run, unknown), (broken_run, broken)):
        assert get_interrupt(interrupt.id).status == "pending"
        assert get_run(run_id).state == "waiting"
        assert [e for e in list_events(run_id) if e.actor == SYSTEM] == []
    assert list_resume_attempts(interrupt_id=unknown.id) == []
    # And the next sweep tries them again, and still changes nothing
    assert sweep_expired(now=later, batch=2) == 0
    assert len(list_interrupts(status="pending")) == 2


def test_resumes_racing_a_sweep_are_either_accepted_or_refused_never_both(
    tasks: TaskRecorder,
) -> None:
    # Given twenty waiting runs whose deadline the sweep will consider passed
    credential = add_actor("alice", ["approver"])
    waiting = [_waiting("expire", expires_in=60)[1] for _ in range(20)]
    later = utcnow() + timedelta(hours=1)
    start = threading.Barrier(2)
    results: dict[str, str] = {}

    def resume_all() -> None:
        start.wait()
        # Newest first, while the sweep goes oldest first: they meet somewhere in the middle.
        for interrupt in reversed(waiting):
            results[interrupt.id] = submit_resume(_contract(interrupt, "alice"), credential).outcome

    def sweep() -> None:
        start.wait()
        sweep_expired(now=later, batch=1)

    # When responders and the sweep go at the same time
    threads = [threading.Thread(target=resume_all), threading.Thread(target=sweep)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    # Then each interrupt went one way only: resolved by alice, or expired with a stale refusal
    tasks.drain()
    for interrupt in waiting:
        final = get_interrupt(interrupt.id)
        system = [e.trigger for e in list_events(interrupt.run_id) if e.actor == SYSTEM]
        if results[interrupt.id] == "accepted":
            assert (final.status, final.resolved_by, system) == ("resolved", "alice", [])
            assert get_run(interrupt.run_id).state == "succeeded"
        else:
            assert results[interrupt.id] == "stale"
            assert (final.status, final.resolved_by, system) == ("expired", SYSTEM, ["expire"])
            assert get_run(interrupt.run_id).state == "expired"
