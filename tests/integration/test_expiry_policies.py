"""Expiry policies that fail closed: the ``default`` policy's answer is checked as a person's is
(revalidation, schema), waits where this process cannot check it, and the sweep says what it
left undone; escalations to roles nobody holds are warned about."""

from __future__ import annotations

import json
import logging
import os
from datetime import timedelta
from typing import Any

import pytest
import redis
from sqlalchemy import update

from models.contracts import InterruptView
from models.db import transaction, utcnow
from models.tables import Interrupt, Run
from tests.flows import expiry, expiry_policies
from tests.flows.expiry_policies import broken_key, price_key
from tests.forked import run_interlude
from tests.services import wait_for
from worker import (
    add_actor,
    enqueue_run,
    get_interrupt,
    get_run,
    list_interrupts,
    list_resume_attempts,
    revoke_actor,
)
from worker.engine.sweeps import SweepReport, sweep_report
from worker.engine.tasknames import TASK_NOTIFY
from worker.runs import list_events
from worker.testing import TaskRecorder, drain

SYSTEM = "system:expiry"


def _outside() -> redis.Redis:
    return redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"], decode_responses=True)


@pytest.fixture()
def outside(scratch: None) -> redis.Redis:
    """The flows' outside world (prices, notifications), empty."""
    return _outside()


def _waiting(flow: str, **run_input: Any) -> tuple[str, InterruptView]:
    run_id = enqueue_run(flow, run_input)
    drain()
    run = get_run(run_id)
    assert run.state == "waiting", run.error
    (interrupt,) = run.pending_interrupts
    return run_id, interrupt


def _sweep(hours: float = 1, *, bring_forward: bool = False) -> SweepReport:
    return sweep_report(now=utcnow() + timedelta(hours=hours), bring_forward=bring_forward)


def _set(table: Any, row_id: str, **values: Any) -> None:
    with transaction() as session:
        session.execute(update(table).where(table.id == row_id).values(**values))


def _deferrals(caplog: pytest.LogCaptureFixture, interrupt_id: str) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING
        and f"expiry of interrupt {interrupt_id} deferred" in r.getMessage()
    ]


def _system_events(run_id: str) -> list[str]:
    return [e.trigger for e in list_events(run_id) if e.actor.startswith("system:")]


def test_default_renews_the_review_when_the_evidence_changed(
    tasks: TaskRecorder, outside: redis.Redis
) -> None:
    # Given two runs waiting with the default policy; one's price changes while it waits
    changed_run, changed = _waiting("defaulting")
    same_run, same = _waiting("defaulting")
    outside.set(price_key(changed_run), 120)
    # When the sweep finds both past their deadline
    assert _sweep() == SweepReport(handled=2)
    # Then the changed one is not approved: a renewed review with the current evidence
    # supersedes its interrupt, exactly as for a person, and the run still waits
    old = get_interrupt(changed.id)
    assert (old.status, old.resolved_by, old.decision) == (
        "superseded",
        "system:revalidation",
        None,
    )
    assert old.superseded_by is not None
    renewed = get_interrupt(old.superseded_by)
    assert (renewed.status, renewed.evidence, renewed.on_expiry) == (
        "pending",
        {"price": 120},
        "default",
    )
    assert renewed.previous_input == {"choice": "fallback"}
    assert renewed.deadline > utcnow() + timedelta(seconds=50)
    assert get_run(changed_run).state == "waiting"
    (attempt,) = list_resume_attempts(interrupt_id=changed.id)
    assert (attempt.outcome, attempt.actor_id, attempt.idempotency_key) == (
        "renewed_review_required",
        SYSTEM,
        f"{SYSTEM}:{changed.id}",
    )
    assert "review_renewed" in _system_events(changed_run)
    # (nothing resumes it: only its notifier's task is published)
    assert [t.name for t in tasks.pending if t.run_id == changed_run] == [TASK_NOTIFY]
    # And the unchanged one resumes with the default, as before
    drain()
    assert f"{changed_run}:{renewed.id}" in outside.lrange(expiry_policies.NOTIFIED, 0, -1)
    assert get_run(same_run).state == "succeeded"
    assert get_interrupt(same.id).resolved_by == SYSTEM
    # When nobody answers the renewed review either, the default applies to it: its evidence
    # is current
    assert _sweep(hours=2) == SweepReport(handled=1)
    drain()
    run = get_run(changed_run)
    assert run.state == "succeeded", run.error
    assert run.output == {"choice": "fallback", "answered_by": SYSTEM, "recorded": True}
    keys = [a.idempotency_key for a in list_resume_attempts(run_id=changed_run)]
    assert keys == [f"{SYSTEM}:{renewed.id}", f"{SYSTEM}:{changed.id}"]  # newest first


def test_default_waits_for_a_process_that_has_the_flow(
    tasks: TaskRecorder, outside: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a waiting run whose flow version this process does not have (its schema it has)
    run_id, interrupt = _waiting("defaulting")
    _set(Run, run_id, flow_version=99)
    caplog.set_level(logging.INFO, logger="worker")
    # When the sweep finds it past its deadline
    assert _sweep() == SweepReport(deferred=1)
    # Then nothing is approved blindly, nothing is recorded: the interrupt stays pending
    (warning,) = _deferrals(caplog, interrupt.id)
    assert "flow 'defaulting' v99 is not loaded here" in warning
    assert get_interrupt(interrupt.id).status == "pending"
    assert get_run(run_id).state == "waiting"
    assert list_resume_attempts(interrupt_id=interrupt.id) == []
    assert _system_events(run_id) == []
    assert tasks.pending == []
    # And it is put off: the next sweeps do not read it again and again
    caplog.clear()
    assert _sweep(hours=1.5) == SweepReport()
    assert _deferrals(caplog, interrupt.id) == []
    # And once a process has the flow, an operator's sweep brings it forward: the default
    # applies, once, under the system's key
    _set(Run, run_id, flow_version=1)
    assert _sweep(bring_forward=True) == SweepReport(handled=1)
    drain()
    assert get_run(run_id).state == "succeeded"
    (attempt,) = list_resume_attempts(interrupt_id=interrupt.id)
    assert (attempt.outcome, attempt.idempotency_key) == ("accepted", f"{SYSTEM}:{interrupt.id}")


def test_default_waits_while_the_revalidation_fails(
    tasks: TaskRecorder, outside: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a waiting run whose revalidation raises (its price source is down)
    run_id, interrupt = _waiting("defaulting")
    outside.set(broken_key(run_id), 1)
    caplog.set_level(logging.INFO, logger="worker")
    # When the sweep finds it past its deadline, it neither approves nor ends the run
    assert _sweep() == SweepReport(deferred=1)
    (warning,) = _deferrals(caplog, interrupt.id)
    assert "business revalidation failed (RuntimeError: price source unavailable)" in warning
    assert get_interrupt(interrupt.id).status == "pending"
    assert get_run(run_id).state == "waiting"
    assert list_resume_attempts(interrupt_id=interrupt.id) == []
    # And once the source is back, the first sweep after the row was put off (an hour: as
    # long as it had been overdue) applies the default
    outside.delete(broken_key(run_id))
    assert _sweep(hours=1.9) == SweepReport()
    assert _sweep(hours=2.1) == SweepReport(handled=1)
    drain()
    assert get_run(run_id).state == "succeeded"


def test_default_waits_when_the_schema_changed_under_its_version(
    tasks: TaskRecorder, outside: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a waiting run whose interrupt's form is no longer the model registered here
    run_id, interrupt = _waiting("defaulting")
    _set(Interrupt, interrupt.id, json_schema={"title": "the form as it was"})
    caplog.set_level(logging.INFO, logger="worker")
    # When sweeps find it past its deadline, one hour, then three hours after it was due
    for hours, again in ((1, 2), (3, 4)):
        caplog.clear()
        assert _sweep(hours) == SweepReport(deferred=1)
        # Then each warns once, saying why and when it looks again (after as long as the
        # row has been overdue), and the run keeps waiting past its deadline
        (warning,) = _deferrals(caplog, interrupt.id)
        assert "input schema expiry_policies_choice.v1 changed since the interrupt" in warning
        assert "deadline passed:" not in warning
        assert not [r for r in caplog.records if r.levelno > logging.WARNING]
        with transaction() as session:
            put_off = session.get_one(Interrupt, interrupt.id).put_off_until
        assert put_off is not None
        assert abs(put_off - (utcnow() + timedelta(hours=again))) < timedelta(minutes=2)
    assert get_interrupt(interrupt.id).status == "pending"
    assert get_run(run_id).state == "waiting"
    assert list_resume_attempts(interrupt_id=interrupt.id) == []
    assert _system_events(run_id) == []


def test_a_default_that_does_not_validate_expires_the_run_saying_so(
    tasks: TaskRecorder, outside: redis.Redis
) -> None:
    # Given a waiting run whose recorded default no longer fits its (unchanged) form
    run_id, interrupt = _waiting("defaulting")
    _set(Interrupt, interrupt.id, default_input={"unknown": 1})
    # When the sweep applies the policy, the refusal is recorded and the wait ends
    assert _sweep() == SweepReport(handled=1)
    (attempt,) = list_resume_attempts(interrupt_id=interrupt.id)
    assert attempt.outcome == "invalid_input"
    assert attempt.reason.startswith("default input refused: expiry_policies_choice.v1: ")
    run = get_run(run_id)
    assert run.state == "expired"
    assert run.error is not None
    assert run.error.startswith("interrupt 'choose' passed its deadline (default input refused: ")
    assert "deadline passed:" not in run.error + attempt.reason


def test_escalation_to_roles_nobody_holds_is_warned_about(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given an escalation to "manager", held only by a revoked actor
    add_actor("former", ["manager"])
    revoke_actor("former")
    run_id, interrupt = _waiting("expiring", policy="escalate", escalation_expires_in=3600)
    caplog.set_level(logging.INFO, logger="worker")
    # When the sweep escalates it
    assert _sweep() == SweepReport(handled=1)
    # Then the escalation happened all the same, and a warning names the interrupt and roles
    new = get_interrupt(get_interrupt(interrupt.id).superseded_by or "")
    assert (new.status, new.roles) == ("pending", ["manager"])
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert interrupt.id in warning and new.id in warning and "manager" in warning
    assert "no active actor holds" in warning
    # And the run's escalation event says so
    (event,) = [e for e in list_events(run_id) if e.trigger == "escalate"]
    assert "no active actor holds" in event.detail["note"]
    # When someone active holds the role, the next escalation is not warned about
    add_actor("boss", ["manager"])
    other_run, _ = _waiting("expiring", policy="escalate", escalation_expires_in=3600)
    caplog.clear()
    assert _sweep() == SweepReport(handled=1)
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []
    (event,) = [e for e in list_events(other_run) if e.trigger == "escalate"]
    assert "note" not in event.detail


def test_the_sweep_command_says_what_it_left_undone(
    tasks: TaskRecorder, outside: redis.Redis, database_url: str
) -> None:
    # Given a default and an escalation due, and an operator's shell without INTERLUDE_FLOWS
    default_run, default = _waiting("defaulting", expires_in=0.2)
    escalated_run, escalated = _waiting(
        "expiring", policy="escalate", expires_in=0.2, escalation_expires_in=3600
    )
    wait_for(lambda: utcnow() > max(default.deadline, escalated.deadline))
    notified = len(outside.lrange(expiry.NOTIFIED, 0, -1))
    env = {k: v for k, v in os.environ.items() if k != "INTERLUDE_FLOWS"}
    env["INTERLUDE_DATABASE_URL"] = database_url

    def sweep(*args: str) -> str:
        done = run_interlude(["sweep", *args], env=env)
        assert done.returncode == 0, done.stderr
        return done.stdout

    # When it sweeps: the escalation is applied but nobody is told; the default waits
    assert json.loads(sweep("--json")) == {"handled": 1, "deferred": 1, "not_notified": 1}
    assert get_interrupt(escalated.id).status == "superseded"
    assert len(outside.lrange(expiry.NOTIFIED, 0, -1)) == notified
    assert (get_run(default_run).state, get_interrupt(default.id).status) == ("waiting", "pending")
    # And the line a person reads does not claim the deferred one was handled
    assert (
        sweep().strip()
        == "0 expired interrupts handled; 1 deferred, still pending (see the warnings)"
    )
    assert [i.status for i in list_interrupts(run_id=escalated_run)] == ["superseded", "pending"]
