"""A real ``celery beat`` schedules the sweep and a real worker applies each expiry policy."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run, list_interrupts
from worker.runs import list_events

SYSTEM = "system:expiry"
# The worker's log line for a beat-scheduled sweep that handled at least one interrupt.
SWEPT = re.compile(r"Task interlude\.sweep_expired\[[^\]]+\] succeeded in \S+: [1-9]")
SWEEP_INTERVAL = 0.5
TERMINAL = {"succeeded", "failed", "cancelled", "expired"}


def test_beat_expires_two_second_waits_with_each_policy(
    db: str,
    shared_worker: WorkerProcess,
    start_worker: Callable[..., WorkerProcess],
    tmp_path: Path,
) -> None:
    # Given beat sweeping every half second, and runs waiting with a two-second deadline
    start_worker(
        "-s",
        str(tmp_path / "beat-schedule"),
        kind="beat",
        INTERLUDE_SWEEP_INTERVAL=str(SWEEP_INTERVAL),
    )
    inputs: dict[str, dict[str, object]] = {
        "expire": {"policy": "expire"},
        "cancel": {"policy": "cancel"},
        "escalate": {"policy": "escalate", "escalation_expires_in": 1, "max_escalations": 1},
        "default": {"policy": "default"},
    }
    runs = {
        name: enqueue_run("expiring", {**data, "expires_in": 2}) for name, data in inputs.items()
    }
    # When nobody answers, within a few sweep intervals after the deadlines
    wait_for(lambda: all(get_run(r).state in TERMINAL for r in runs.values()), timeout=30)
    # Then every run ended in its policy's state
    states = {name: get_run(run_id).state for name, run_id in runs.items()}
    assert states == {
        "expire": "expired",
        "cancel": "cancelled",
        "escalate": "expired",
        "default": "succeeded",
    }

    # And the events say that system:expiry did it
    def by_system(run_id: str) -> list[tuple[str, str | None]]:
        return [(e.trigger, e.to_state) for e in list_events(run_id) if e.actor.endswith(SYSTEM)]

    assert by_system(runs["expire"]) == [("expire", "expired")]
    assert by_system(runs["cancel"]) == [("cancel", "cancelled")]
    assert by_system(runs["escalate"]) == [("escalate", None), ("expire", "expired")]
    assert by_system(runs["default"]) == [("accept_resume", "resuming")]
    assert get_run(runs["default"]).output["choice"] == "fallback"
    # And no interrupt was left pending: the first was superseded, the escalation expired
    chain = list_interrupts(run_id=runs["escalate"])
    assert [(i.escalation_level, i.status, i.roles) for i in chain] == [
        (0, "superseded", ["approver"]),
        (1, "expired", ["manager"]),
    ]
    assert list_interrupts(status="pending") == []
    # And it was the worker, fed by beat, that swept them
    assert SWEPT.search(shared_worker.output())
