"""The notification outbox: what each notifier is owed is written with the interrupt, the notify
task marks it done, and the reaper publishes again an owed one whose task was refused or lost,
once, as its next attempt; never for a closed interrupt; after the last attempt, one warning
line and a ``notify_failed`` event. Tasks run here through the dispatch seam.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterator
from datetime import datetime, timedelta
from typing import Any

import pytest

from models import notifications as notification_store
from models.contracts import InterruptView
from models.db import transaction, utcnow
from models.enums import NotificationStatus
from models.settings import get_settings, notify_due_in, reset_settings
from tests.flows import agents
from tests.flows.interrupts import scratch_redis
from tests.flows.notifiers import calls
from tests.resumes import contract_for, drain_pending, pending
from worker import StepContext, add_actor, enqueue_run, get_run, submit_resume
from worker.cli import main
from worker.engine.dispatch import set_notice_publisher
from worker.engine.reaper import reap
from worker.engine.runtime import execute
from worker.engine.sweeps import sweep_expired
from worker.flows import flow as registry
from worker.flows.flow import Notifier
from worker.ops.notifications import deliver
from worker.runs import list_events
from worker.testing import Published, TaskRecorder

NOTIFIERS = ["tell_chat", "tell_mail"]


@pytest.fixture()
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.undo()
    reset_settings()


def _waiting(tasks: TaskRecorder) -> tuple[str, str]:
    """A ``noticed`` run whose step executed, its notify tasks published (not run): (run,
    interrupt)."""
    run_id = enqueue_run("noticed", {"ticket": "T-1"})
    assert [t.name for t in tasks.clear()] == ["interlude.run_step"]
    execute(run_id)
    interrupt = pending(run_id)
    assert interrupt is not None, get_run(run_id).state
    return run_id, interrupt.id


def _owed(run_id: str) -> list[tuple[str, str, int]]:
    with transaction(readonly=True) as session:
        rows = notification_store.of_run(session, run_id)
        return [(row.notifier, row.status, row.attempt) for row in rows]


def _notices(tasks: list[Published]) -> list[tuple[str, int]]:
    return [(t.notice.notifier, t.notice.attempt) for t in tasks if t.notice is not None]


def _overdue() -> datetime:
    """A moment at which a notify task published now is overdue."""
    return utcnow() + timedelta(seconds=notify_due_in(get_settings()) + 1)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_what_is_owed_is_written_with_the_interrupt_and_marked_done_by_the_task(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run of a flow with two notifiers, When its step stops on an interrupt
    run_id, _ = _waiting(tasks)
    # Then each notifier is owed news of it, its first attempt published
    assert _owed(run_id) == [(name, "owed", 1) for name in NOTIFIERS]
    # When the tasks run, Then each is marked notified
    assert tasks.drain() == 2
    assert _owed(run_id) == [(name, "notified", 1) for name in NOTIFIERS]
    # And a run of a flow without notifiers owes nothing (its step writes no row)
    other = enqueue_run("approval", {})
    tasks.drain()
    assert get_run(other).state == "waiting"
    assert _owed(other) == []


def test_a_refused_notify_publish_is_delivered_once_by_the_reaper(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a broker that refuses notify tasks when a run stops on an interrupt
    def broker_down(*_: Any, **__: Any) -> None:
        raise ConnectionError("broker down")

    previous = set_notice_publisher(broker_down)
    try:
        run_id = enqueue_run("noticed", {})
        tasks.drain()
    finally:
        set_notice_publisher(previous)
    interrupt = pending(run_id)
    assert interrupt is not None
    assert calls("chat", run_id) == calls("mail", run_id) == []
    # When the broker is back and the reaper passes (the refusal made them due at once)
    reap()
    # Then each notification is published again, as its first attempt, and delivered once
    assert _notices(tasks.pending) == [(name, 1) for name in NOTIFIERS]
    assert tasks.drain() == 2
    assert [c["id"] for c in calls("chat", run_id)] == [interrupt.id]
    assert [c["id"] for c in calls("mail", run_id)] == [interrupt.id]
    # And later passes publish nothing more
    reap(now=_overdue())
    reap(now=_overdue() + timedelta(hours=1))
    assert tasks.pending == []
    assert _owed(run_id) == [(name, "notified", 1) for name in NOTIFIERS]


def test_a_lost_notify_task_is_published_again_once_overdue_and_delivered_once(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run whose notify tasks were lost (a killed worker held them, a broker lost them)
    run_id, interrupt_id = _waiting(tasks)
    assert _notices(tasks.clear()) == [(name, 1) for name in NOTIFIERS]
    # When the reaper passes before they are overdue, Then it leaves them be
    reap()
    assert tasks.pending == []
    # When it passes once they are overdue
    reap(now=_overdue())
    # Then each is published again, as its second attempt, and delivered once
    assert _notices(tasks.pending) == [(name, 2) for name in NOTIFIERS]
    assert tasks.drain() == 2
    assert [c["id"] for c in calls("chat", run_id)] == [interrupt_id]
    assert [c["id"] for c in calls("mail", run_id)] == [interrupt_id]
    assert _owed(run_id) == [(name, "notified", 2) for name in NOTIFIERS]
    # And nothing more is published later
    reap(now=_overdue() + timedelta(hours=1))
    assert tasks.pending == []


def test_an_interrupt_closed_meanwhile_is_not_notified_by_the_reaper(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run whose notify tasks were lost, and whose interrupt was answered since
    approver = add_actor("ann", ["approver"])
    run_id, _ = _waiting(tasks)
    tasks.clear()
    interrupt = pending(run_id)
    assert interrupt is not None
    assert submit_resume(contract_for(interrupt, "ann"), approver).accepted
    tasks.drain()
    assert get_run(run_id).state == "succeeded"
    # When the reaper finds them overdue
    reap(now=_overdue())
    # Then nobody is asked to answer it: nothing published, each marked skipped
    assert tasks.pending == []
    assert calls("chat", run_id) == calls("mail", run_id) == []
    assert _owed(run_id) == [(name, "skipped", 1) for name in NOTIFIERS]


def test_the_reaper_gives_up_after_the_last_attempt_with_one_line_and_an_event(
    db: str,
    tasks: TaskRecorder,
    settings_env: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Given one retry, and a run whose notify tasks are lost each time
    settings_env.setenv("INTERLUDE_NOTIFY_RETRIES", "1")
    reset_settings()
    run_id, interrupt_id = _waiting(tasks)
    tasks.clear()
    reap(now=_overdue())
    assert _notices(tasks.clear()) == [(name, 2) for name in NOTIFIERS]
    # When the second attempts are overdue too
    reap(now=_overdue() + timedelta(hours=1))
    # Then nothing is published: each is failed, one warning line each, an event each
    assert tasks.pending == []
    assert _owed(run_id) == [(name, "failed", 2) for name in NOTIFIERS]
    gave_up = [w for w in _warnings(caplog) if "not told" in w]
    assert gave_up == [
        f"interrupt notifier {name} not told of interrupt {interrupt_id} after 2 attempts: "
        "its task was lost (no worker ended it in time)"
        for name in NOTIFIERS
    ]
    failed = [e for e in list_events(run_id) if e.trigger == "notify_failed"]
    assert sorted(e.detail["notifier"] for e in failed) == NOTIFIERS
    assert get_run(run_id).state == "waiting"


def test_interrupts_show_says_which_notifier_is_owed_and_which_failed(
    db: str, tasks: TaskRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a run whose chat notification failed for good and whose mail notification is owed
    _, interrupt_id = _waiting(tasks)
    tasks.clear()
    with transaction() as session:
        notification_store.finish(
            session,
            interrupt_id,
            "tell_chat",
            NotificationStatus.FAILED,
            at=utcnow(),
            error="ConnectionError: chat said 503",
        )
    # When an operator shows the interrupt, Then each notifier's standing is there
    capsys.readouterr()
    assert main(["interrupts", "show", interrupt_id]) == 0
    out = capsys.readouterr().out
    assert (
        "tell_chat failed (attempt 1, ConnectionError: chat said 503); tell_mail owed (attempt 1)"
        in out
    )
    # And as JSON
    assert main(["interrupts", "show", interrupt_id, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["notifications"]
    assert [(n["notifier"], n["status"]) for n in shown] == [
        ("tell_chat", "failed"),
        ("tell_mail", "owed"),
    ]


def test_an_escalated_interrupt_is_owed_to_the_same_notifiers_in_the_sweep_s_transaction(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run of a flow with a notifier, told of its interrupt, whose deadline passes
    run_id = enqueue_run(
        "expiring", {"policy": "escalate", "expires_in": 0.2, "escalation_expires_in": 3600}
    )
    tasks.drain()
    old = pending(run_id)
    assert old is not None
    assert [status for _, status, _ in _owed(run_id)] == ["notified"]
    time.sleep(0.3)
    # When the sweep escalates it, and the notify task of the new interrupt is lost
    assert sweep_expired() == 1
    new = pending(run_id)
    assert new is not None and new.supersedes == old.id
    assert [t.notice.interrupt_id for t in tasks.clear() if t.notice is not None] == [new.id]
    with transaction(readonly=True) as session:
        rows = {row.interrupt_id: row.status for row in notification_store.of_run(session, run_id)}
    assert rows == {old.id: "notified", new.id: "owed"}
    # Then the reaper publishes it again once overdue
    reap(now=_overdue())
    assert [t.notice.interrupt_id for t in tasks.pending if t.notice is not None] == [new.id]


def test_a_review_renewed_on_a_newer_version_is_owed_to_that_version_s_notifiers(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run of version 1 answered, not yet continued, and a version 2 with a notifier
    # whose evidence differs (so the answer does not carry: a renewed review)
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("amounts", {})
    asked = drain_pending(run_id, "go")
    assert submit_resume(contract_for(asked, "mia", input={"note": "ok"}), manager).accepted
    told: list[str] = []

    def tell_v2(interrupt: InterruptView) -> None:
        told.append(interrupt.id)

    _deploy_amounts_v2(monkeypatch, tell_v2)
    # When version 2 continues the run, and the notify task of its renewed review is lost
    [step] = tasks.clear()
    execute(step.run_id)
    renewed = pending(run_id)
    assert renewed is not None and renewed.previous_input == {"note": "ok"}
    assert _notices(tasks.clear()) == [(tell_v2.__qualname__, 1)]
    # Then it is owed, in the claim's transaction, and the reaper publishes it again
    assert [(n, s) for n, s, _ in _owed(run_id)] == [(tell_v2.__qualname__, "owed")]
    reap(now=_overdue())
    tasks.drain()
    assert told == [renewed.id]


def _deploy_amounts_v2(monkeypatch: pytest.MonkeyPatch, notifier: Notifier) -> None:
    """Version 2 of ``amounts`` (tests.flows.agents) replaces version 1, with ``notifier``: it
    shows the amount in cents, so an answer given to version 1 does not carry."""
    monkeypatch.setattr(
        registry, "_flows", {k: f for k, f in registry._flows.items() if k[0] != "amounts"}
    )
    v2 = registry.Flow("amounts", version=2)
    v2.notifier(notifier)
    # What the approval is checked against now: the answer is asked again when the run is
    # claimed (worker.flows.migration), before the step runs.
    v2.revalidate("go")(lambda _context: {"amount_cents": 1000})

    @v2.step("pay")
    def pay(ctx: StepContext) -> None:
        ctx.interrupt(
            "go",
            kind="approval",
            input=agents.Go,
            authority=["manager"],
            evidence={"amount_cents": 1000},
            expires_in=600,
        )

    v2.migrates_from(1)(lambda state: state)


def test_a_retry_whose_publish_is_refused_is_delivered_by_the_reaper(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a chat notifier whose first call fails, and a broker that refuses its retry
    run_id, interrupt_id = _waiting(tasks)
    scratch_redis().set(f"notice:chat-fails:{run_id}", 1)
    first = {t.notice.notifier: t.notice for t in tasks.clear() if t.notice is not None}

    def broker_down(*_: Any, **__: Any) -> None:
        raise ConnectionError("broker down")

    previous = set_notice_publisher(broker_down)
    try:
        deliver(first["tell_chat"])
    finally:
        set_notice_publisher(previous)
    assert tasks.pending == []
    # When the reaper passes (the refusal made it due at once)
    reap()
    # Then the second attempt goes out, and the chat is told
    assert _notices(tasks.pending) == [("tell_chat", 2)]
    tasks.drain()
    assert [c["id"] for c in calls("chat", run_id)] == [interrupt_id] * 2
    assert _owed(run_id) == [("tell_chat", "notified", 2), ("tell_mail", "owed", 1)]
