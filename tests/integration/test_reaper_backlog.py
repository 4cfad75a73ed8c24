"""A reaper pass works through a backlog batch after batch, within one beat interval."""

from __future__ import annotations

import logging
from datetime import timedelta
from types import SimpleNamespace

import pytest
from sqlalchemy import func, select

from models.db import transaction, utcnow
from models.tables import Run
from tests.integration.test_reaper import _claimed_by_dead_worker, _queued, _set_fields
from tests.services import broker_down
from worker.engine import reaper
from worker.engine.reaper import reap
from worker.engine.tasknames import TASK_STEP
from worker.testing import TaskRecorder

BATCH = 5


def _in_state(state: str) -> int:
    with transaction(readonly=True) as session:
        return int(session.execute(select(func.count()).where(Run.state == state)).scalar_one())


def _lost_dispatches(count: int) -> list[str]:
    """Queued runs whose task was lost an hour ago."""
    runs = [_queued() for _ in range(count)]
    with transaction() as session:
        for run_id in runs:
            _set_fields(session, run_id, dispatched_at=utcnow() - timedelta(hours=1))
    return runs


class Clock:
    """``time.monotonic`` for the reaper: the readings given, then ever later."""

    def __init__(self, *readings: float) -> None:
        self.readings = list(readings)

    def monotonic(self) -> float:
        return self.readings.pop(0) if self.readings else 1e12


def test_one_pass_requeues_every_expired_lease_batch_after_batch(tasks: TaskRecorder) -> None:
    # Given more runs of dead workers than one batch holds
    runs = [_claimed_by_dead_worker() for _ in range(2 * BATCH + 2)]
    # When the reaper passes once
    handled = reap(batch=BATCH)
    # Then every one of them is requeued and published, not the first batch only
    assert handled == len(runs)
    assert _in_state("running") == 0
    assert sorted(t.run_id for t in tasks.pending) == sorted(runs)
    assert reap(batch=BATCH) == 0


def test_one_pass_republishes_every_lost_dispatch_batch_after_batch(tasks: TaskRecorder) -> None:
    runs = _lost_dispatches(2 * BATCH + 2)
    assert reap(batch=BATCH) == len(runs)
    assert sorted((t.name, t.run_id) for t in tasks.pending) == sorted(
        (TASK_STEP, run_id) for run_id in runs
    )
    assert reap(batch=BATCH) == 0


def test_a_pass_starts_no_batch_after_one_beat_interval(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a backlog of three batches, and a clock that passes the beat interval only once
    # the second batch is done
    runs = [_claimed_by_dead_worker() for _ in range(2 * BATCH + 2)]
    clock = SimpleNamespace(monotonic=Clock(0.0, 0.0).monotonic)
    monkeypatch.setattr(reaper, "time", clock, raising=False)
    # When the reaper passes
    handled = reap(batch=BATCH)
    # Then it did those two batches and left the rest to the next pass
    assert handled == 2 * BATCH
    assert _in_state("running") == 2
    monkeypatch.undo()
    assert reap(batch=BATCH) == 2
    assert sorted(t.run_id for t in tasks.pending) == sorted(runs)


def test_a_refused_publish_ends_the_pass_and_nothing_claims_a_republish(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given more lost dispatches than one batch holds, while the broker is down
    runs = _lost_dispatches(2 * BATCH + 2)
    caplog.set_level(logging.WARNING, logger="worker")
    # When the reaper passes
    with broker_down() as refused:
        reap(batch=BATCH)
    # Then it stopped at the first refusal, and logged no republish that did not happen
    assert len(refused) == 1
    messages = [r.getMessage() for r in caplog.records]
    assert not [m for m in messages if "republished" in m], messages
    assert f"{BATCH - 1} more run(s) left for the next reaper pass" in messages
    # And once the broker is back the next pass publishes all of them, each logged once sent
    caplog.clear()
    assert reap(batch=BATCH) == len(runs)
    assert sorted(t.run_id for t in tasks.pending) == sorted(runs)
    logged = [getattr(r, "run_id", None) for r in caplog.records if "republished" in r.getMessage()]
    assert sorted(logged) == sorted(runs)


def test_requeued_runs_the_broker_refused_are_published_at_the_next_pass(
    tasks: TaskRecorder,
) -> None:
    # Given runs of dead workers, requeued while the broker is down
    runs = [_claimed_by_dead_worker() for _ in range(3)]
    with broker_down():
        assert reap(batch=BATCH) == len(runs)
    assert _in_state("queued") == len(runs)
    # When the broker is back, the next pass publishes them without waiting for a dispatch
    # that never went out
    assert reap(batch=BATCH) == len(runs)
    assert sorted(t.run_id for t in tasks.pending) == sorted(runs)


def test_a_republish_is_logged_only_once_the_broker_took_it(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture
) -> None:
    # Given a lost dispatch, republished while the broker is down
    _lost_dispatches(1)
    caplog.set_level(logging.WARNING, logger="worker")
    with broker_down():
        assert reap() == 1
    # Then the log says the publish failed, and nothing says it was republished
    messages = [r.getMessage() for r in caplog.records]
    assert [m for m in messages if "publish failed" in m] != []
    assert [m for m in messages if "republished" in m] == []
