"""A notifier's call on a real worker: cut at INTERLUDE_NOTIFY_TIMEOUT_SECONDS by a prefork pool
(Celery's soft time limit), then retried and logged like any failure; a threads pool enforces no
time limit, and the call runs to its end."""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable

from tests.flows.interrupts import scratch_redis
from tests.flows.notifiers import calls
from tests.resumes import wait_pending
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run

LIMITED = {
    "INTERLUDE_NOTIFY_TIMEOUT_SECONDS": "1",
    "INTERLUDE_NOTIFY_RETRIES": "1",
    "INTERLUDE_NOTIFY_BACKOFF": "0.1",
}


def _sleepy_run(seconds: float, *, deaf: bool = False, crash: bool = False) -> str:
    """A ``noticed`` run whose chat notifier sleeps ``seconds`` at each call (``deaf``: and
    as long again after the soft time limit; ``crash``: kills its process instead)."""
    ticket = f"T-{uuid.uuid4().hex[:8]}"
    scratch_redis().set(f"notice:chat-sleeps:{ticket}", seconds)
    for mark, wanted in (("deaf", deaf), ("crashes", crash)):
        if wanted:
            scratch_redis().set(f"notice:chat-{mark}:{ticket}", 1)
    return enqueue_run("noticed", {"ticket": ticket})


def test_a_prefork_worker_cuts_a_slow_notifier_at_its_time_limit_and_retries_it(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a prefork worker (its default pool) whose notifiers have 1 s and one retry
    worker = start_worker("-c", "2", **LIMITED)
    # When a run stops on an interrupt whose chat notifier would take 30 s
    run_id = _sleepy_run(30)
    interrupt = wait_pending(run_id)
    # Then each call is cut after a second, tried again once, then one warning line says so
    pattern = (
        rf"interrupt notifier tell_chat failed for interrupt {interrupt.id} "
        r"\(attempt 2, the last\): SoftTimeLimitExceeded"
    )
    wait_for(lambda: re.search(pattern, worker.output()), timeout=60)
    assert len(re.findall(pattern, worker.output())) == 1
    assert [call["id"] for call in calls("chat", run_id)] == [interrupt.id] * 2
    # And the other notifier was called once; the run waits, unaffected
    assert [call["id"] for call in calls("mail", run_id)] == [interrupt.id]
    assert get_run(run_id).state == "waiting"


def test_a_call_deaf_to_the_soft_limit_is_killed_at_the_hard_one_and_not_run_again(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a prefork worker whose notifiers have 1 s (the hard limit 10 s later)
    worker = start_worker("-c", "2", **LIMITED)
    # When the chat notifier sleeps on through the soft time limit
    run_id = _sleepy_run(30, deaf=True)
    interrupt = wait_pending(run_id)
    # Then its pool child is killed at the hard limit (Celery's error line says so)
    hard = r"Hard time limit \(11(\.0)?s\) exceeded for interlude\.notify"
    wait_for(lambda: re.search(hard, worker.output()), timeout=60)
    # And the task is not given to the worker again: nothing would bound that loop
    time.sleep(3)
    assert [call["id"] for call in calls("chat", run_id)] == [interrupt.id]
    assert [call["id"] for call in calls("mail", run_id)] == [interrupt.id]
    assert get_run(run_id).state == "waiting"


def test_a_notifier_that_kills_its_pool_child_is_not_run_again(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a prefork worker (its tasks are acknowledged late)
    worker = start_worker("-c", "2", **LIMITED)
    # When the chat notifier's process dies in the call
    run_id = _sleepy_run(0, crash=True)
    interrupt = wait_pending(run_id)
    wait_for(lambda: "WorkerLostError" in worker.output(), timeout=60)
    # Then its task is not given to a new child again (a step's would be: the run counts its
    # attempts; nothing would bound a notification's), and the worker goes on
    time.sleep(3)
    assert [call["id"] for call in calls("chat", run_id)] == [interrupt.id]
    assert [call["id"] for call in calls("mail", run_id)] == [interrupt.id]
    other = _sleepy_run(0)
    wait_for(lambda: calls("mail", other), timeout=30)


def test_a_threads_pool_enforces_no_time_limit(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a threads-pool worker, told the same 1 s limit
    worker = start_worker("-P", "threads", "-c", "4", **LIMITED)
    # When the chat notifier takes 3 s
    run_id = _sleepy_run(3)
    interrupt = wait_pending(run_id)
    wait_for(lambda: "notifier tell_chat told of interrupt" in worker.output(), timeout=60)
    # Then the call ran to its end (Celery's threads pool has no time limits): no failure, no
    # retry; it held its thread for the 3 s
    assert [call["id"] for call in calls("chat", run_id)] == [interrupt.id]
    assert "SoftTimeLimitExceeded" not in worker.output()
    assert f"failed for interrupt {interrupt.id}" not in worker.output()
