"""A notify task lost with its worker (SIGKILLed in the middle of the notifier's call) is not lost:
the notification stays owed in the database, and once its task is overdue the reaper (beat)
publishes it again for a new worker, which tells the notifier. The other notifier, told before
the kill, is not told twice.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path

from models import notifications as notification_store
from models.db import transaction
from tests.flows.interrupts import scratch_redis
from tests.flows.notifiers import calls
from tests.resumes import wait_pending
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run

# A notify task is overdue 3 + 10 (the hard limit's grace) + 1 seconds after its publish; the
# reaper looks twice a second.
OUTBOX_ENV = {
    "INTERLUDE_NOTIFY_TIMEOUT_SECONDS": "3",
    "INTERLUDE_NOTIFY_OVERDUE_AFTER": "1",
    "INTERLUDE_REAP_INTERVAL": "0.5",
}


def _statuses(run_id: str) -> dict[str, tuple[str, int]]:
    with transaction(readonly=True) as session:
        rows = notification_store.of_run(session, run_id)
        return {row.notifier: (row.status, row.attempt) for row in rows}


def test_a_notify_task_lost_with_its_killed_worker_is_delivered_by_a_new_worker(
    db: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # Given a worker, and a run whose chat notifier blocks in its call (60 s)
    first = start_worker("-c", "2", **OUTBOX_ENV)
    ticket = f"T-{uuid.uuid4().hex[:8]}"
    scratch_redis().set(f"notice:chat-sleeps:{ticket}", 60)
    run_id = enqueue_run("noticed", {"ticket": ticket})
    interrupt = wait_pending(run_id)
    # When the worker is killed (SIGKILL) while the chat notifier is in its call, the mail
    # notifier told already
    wait_for(lambda: calls("chat", run_id), timeout=30)
    wait_for(lambda: _statuses(run_id).get("tell_mail") == ("notified", 1), timeout=30)
    first.kill()
    assert _statuses(run_id)["tell_chat"] == ("owed", 1)
    scratch_redis().delete(f"notice:chat-sleeps:{ticket}")
    # And a new worker and beat start
    start_worker("-c", "2", **OUTBOX_ENV)
    start_worker("-s", str(tmp_path / "beat-schedule"), kind="beat", **OUTBOX_ENV)
    # Then the reaper publishes the chat's notification again once overdue, and the new worker
    # tells the chat notifier: its second call, as the second attempt
    wait_for(lambda: _statuses(run_id)["tell_chat"] == ("notified", 2), timeout=60)
    assert [call["id"] for call in calls("chat", run_id)] == [interrupt.id] * 2
    # And nobody is told twice after that, the mail notifier not again at all
    time.sleep(2)
    assert len(calls("chat", run_id)) == 2
    assert [call["id"] for call in calls("mail", run_id)] == [interrupt.id]
    assert get_run(run_id).state == "waiting"
