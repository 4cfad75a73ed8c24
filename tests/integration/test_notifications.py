"""Flow notifiers run in notify tasks of their own, after the interrupt committed: one task per
notifier, retried with backoff, never for a closed interrupt; a flow without notifiers publishes
nothing. The tasks run here through the dispatch seam (``tasks.drain()``), as a worker runs them.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterator
from typing import Any

import pytest

from models import interrupts as interrupt_store
from models.db import transaction
from models.settings import reset_settings
from tests.flows.interrupts import scratch_redis
from tests.flows.notifiers import calls
from tests.resumes import contract_for, pending
from tests.services import statements_sent
from worker import add_actor, enqueue_run, get_run, submit_resume
from worker.engine.dispatch import Notice, publish_notice, set_notice_publisher
from worker.engine.runtime import execute
from worker.engine.tasknames import QUEUE_NOTIFY, TASK_NOTIFY
from worker.flows.flow import get_flow
from worker.interrupts import notify
from worker.ops.notifications import deliver
from worker.testing import Published, TaskRecorder

NOTIFIERS = ["tell_chat", "tell_mail"]


@pytest.fixture()
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    """Set ``INTERLUDE_*`` variables for this test (reset_settings after each setenv)."""
    yield monkeypatch
    monkeypatch.undo()
    reset_settings()


def _retries(env: pytest.MonkeyPatch, retries: int) -> None:
    env.setenv("INTERLUDE_NOTIFY_RETRIES", str(retries))
    reset_settings()


def _waiting(tasks: TaskRecorder, ticket: str = "T-1") -> tuple[str, str]:
    """A ``noticed`` run whose step executed (its notify tasks not yet): (run, interrupt)."""
    run_id = enqueue_run("noticed", {"ticket": ticket})
    assert [t.name for t in tasks.clear()] == ["interlude.run_step"]
    execute(run_id)
    interrupt = pending(run_id)
    assert interrupt is not None, get_run(run_id).state
    return run_id, interrupt.id


def _notices(tasks: list[Published]) -> list[tuple[str, int]]:
    return [(t.notice.notifier, t.notice.attempt) for t in tasks if t.notice is not None]


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_each_notifier_is_called_once_per_interrupt_by_a_task_of_its_own(
    db: str, tasks: TaskRecorder
) -> None:
    # Given a run of a flow with two notifiers, When its step stops on an interrupt
    run_id, interrupt_id = _waiting(tasks)
    # Then no notifier was called in the step's execution: one notify task per notifier is
    # published to interlude.notify, carrying only JSON that names the interrupt and notifier
    assert calls("chat", run_id) == calls("mail", run_id) == []
    published = tasks.pending
    assert [(t.name, t.queue) for t in published] == [(TASK_NOTIFY, QUEUE_NOTIFY)] * 2
    kwargs = [t.notice.as_kwargs() for t in published if t.notice is not None]
    assert json.loads(json.dumps(kwargs)) == [
        {
            "interrupt_id": interrupt_id,
            "run_id": run_id,
            "flow": "noticed",
            "version": 1,
            "notifier": notifier,
            "attempt": 1,
        }
        for notifier in NOTIFIERS
    ]
    # When a worker runs them, Then each notifier is called once, with the committed interrupt
    assert tasks.drain() == 2
    for notifier in ("chat", "mail"):
        [call] = calls(notifier, run_id)
        assert (call["id"], call["status"], call["pid"]) == (interrupt_id, "pending", os.getpid())
    assert get_run(run_id).state == "waiting"


def test_a_failing_notifier_is_retried_with_backoff_then_logged_once(
    db: str, tasks: TaskRecorder, settings_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given two retries (first after 0.01 s: tests/conftest.py), and a chat that always fails
    _retries(settings_env, 2)
    run_id, interrupt_id = _waiting(tasks)
    scratch_redis().set(f"notice:chat-fails:{run_id}", 1000)
    # When the notify tasks run
    caplog.set_level(logging.INFO, logger="worker")
    tasks.drain()
    # Then the chat notifier was called three times, each attempt a task of its own, due later
    # each time (0.01 s, then 0.02 s)
    assert len(calls("chat", run_id)) == 3
    assert _notices(tasks.published) == [
        ("tell_chat", 1),
        ("tell_mail", 1),
        ("tell_chat", 2),
        ("tell_chat", 3),
    ]
    retried = [r.getMessage() for r in caplog.records if "again in" in r.getMessage()]
    assert [r.split(",")[0] for r in retried] == [
        f"interrupt notifier tell_chat failed for interrupt {interrupt_id} (attempt 1)",
        f"interrupt notifier tell_chat failed for interrupt {interrupt_id} (attempt 2)",
    ]
    assert ["again in 0.01s" in retried[0], "again in 0.02s" in retried[1]] == [True, True]
    # And its last failure is one warning line: notifier, interrupt, error (escaped, one line)
    assert _warnings(caplog) == [
        f"interrupt notifier tell_chat failed for interrupt {interrupt_id} (attempt 3, the "
        "last): ConnectionError: chat said 503\\nat call 3"
    ]
    # And the run is not affected
    assert get_run(run_id).state == "waiting"


def test_a_retry_of_one_notifier_never_calls_another_again(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a chat that fails twice, then answers
    run_id, interrupt_id = _waiting(tasks)
    scratch_redis().set(f"notice:chat-fails:{run_id}", 2)
    # When the notify tasks run
    tasks.drain()
    # Then the chat was called until it succeeded, and the mail notifier once
    assert [c["id"] for c in calls("chat", run_id)] == [interrupt_id] * 3
    assert [c["id"] for c in calls("mail", run_id)] == [interrupt_id]
    # And a notifier that succeeded in the end is no warning
    assert _warnings(caplog) == []


def test_a_closed_interrupt_is_not_notified(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a run waiting, whose notify tasks have not run yet
    approver = add_actor("ann", ["approver"])
    run_id, interrupt_id = _waiting(tasks)
    interrupt = pending(run_id)
    assert interrupt is not None
    # When the interrupt is answered first
    assert submit_resume(contract_for(interrupt, "ann"), approver).accepted
    caplog.set_level(logging.INFO, logger="worker.ops.notifications")
    tasks.drain()
    # Then nobody is asked to answer it: no notifier is called, each task says why at INFO
    assert get_run(run_id).state == "succeeded"
    assert calls("chat", run_id) == calls("mail", run_id) == []
    assert [r.getMessage() for r in caplog.records] == [
        f"notifier {name} not called: interrupt {interrupt_id} is resolved" for name in NOTIFIERS
    ]


def test_a_retry_for_an_interrupt_closed_meanwhile_calls_nobody(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a chat notifier whose first call failed: its retry is published
    approver = add_actor("ann", ["approver"])
    run_id, interrupt_id = _waiting(tasks)
    scratch_redis().set(f"notice:chat-fails:{run_id}", 1)
    for task in tasks.clear():
        assert task.notice is not None
        deliver(task.notice)
    assert [c["id"] for c in calls("chat", run_id)] == [interrupt_id]
    assert _notices(tasks.pending) == [("tell_chat", 2)]
    # When the interrupt is answered before the retry runs
    interrupt = pending(run_id)
    assert interrupt is not None
    assert submit_resume(contract_for(interrupt, "ann"), approver).accepted
    tasks.drain()
    # Then the retry calls nobody, and warns of nothing
    assert len(calls("chat", run_id)) == 1
    assert get_run(run_id).state == "succeeded"
    assert _warnings(caplog) == []


def test_notify_only_publishes_and_a_flow_without_notifiers_publishes_nothing(
    db: str, tasks: TaskRecorder
) -> None:
    # Given an interrupt (its row, as the step's commit left it)
    _, interrupt_id = _waiting(tasks)
    tasks.clear()
    with transaction(readonly=True) as session:
        row = interrupt_store.get(session, interrupt_id)
        assert row is not None
        session.expunge(row)
    # When a flow with notifiers is told of it: one publish per notifier, and not a statement
    with statements_sent(db) as statements:
        notify(get_flow("noticed", 1), row)
    assert statements == []
    assert _notices(tasks.clear()) == [("tell_chat", 1), ("tell_mail", 1)]
    # When a flow without notifiers is told of it: nothing at all
    with statements_sent(db) as statements:
        notify(get_flow("approval", 1), row)
    assert statements == []
    assert tasks.pending == []
    # And a run of such a flow, up to its interrupt, publishes no notify task
    other = enqueue_run("approval", {})
    tasks.drain()
    assert get_run(other).state == "waiting"
    assert [t.name for t in tasks.published if t.run_id == other] == ["interlude.run_step"]


def test_a_publish_the_broker_refuses_leaves_the_run_waiting_and_is_one_line(
    db: str, tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a broker that refuses notify tasks
    def broker_down(*_: Any, **__: Any) -> None:
        raise ConnectionError("broker down\nfor maintenance")

    previous = set_notice_publisher(broker_down)
    caplog.set_level(logging.INFO, logger="worker")
    try:
        # When a run of a flow with notifiers stops on an interrupt
        run_id = enqueue_run("noticed", {})
        tasks.drain()
    finally:
        set_notice_publisher(previous)
    # Then the run waits as it would have, nobody was called
    interrupt = pending(run_id)
    assert interrupt is not None
    assert calls("chat", run_id) == calls("mail", run_id) == []
    # And each refused publish is one warning line naming the interrupt and the notifier
    assert _warnings(caplog) == [
        f"notifier {name} not told of interrupt {interrupt.id} (attempt 1) yet: publish failed, "
        "the reaper publishes it again: ConnectionError: broker down\\nfor maintenance"
        for name in NOTIFIERS
    ]


def test_a_notifier_this_worker_does_not_have_is_retried_then_logged(
    db: str, tasks: TaskRecorder, settings_env: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a notify task naming a notifier the flow has not (here: older or newer code)
    _retries(settings_env, 1)
    run_id, interrupt_id = _waiting(tasks)
    tasks.clear()
    publish_notice(Notice(interrupt_id, run_id, "noticed", 1, "tell_pager"))
    # When it runs, Then it is tried again (another worker may have it), then logged once
    tasks.drain()
    assert _warnings(caplog) == [
        f"interrupt notifier tell_pager failed for interrupt {interrupt_id} (attempt 2, the "
        "last): UnknownNotifierError: flow 'noticed' v1 has no notifier 'tell_pager' here; its "
        "notifiers: tell_chat, tell_mail"
    ]
