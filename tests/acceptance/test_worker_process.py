"""What only a real worker process shows: it calls the notifiers, and serves the metrics."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from tests.flows.interrupts import scratch_redis
from tests.integration.test_stats import free_port, scrape
from tests.resumes import wait_pending
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run, get_run


def test_the_notifier_is_called_in_the_worker_after_the_commit(
    db: str, shared_worker: WorkerProcess
) -> None:
    redis = scratch_redis()
    redis.set("price:sku-1", "3")
    run_id = enqueue_run("priced", {"sku": "sku-1"})
    interrupt = wait_pending(run_id)
    raw = wait_for(lambda: redis.lrange(f"notified:{run_id}", 0, -1))
    notes = [json.loads(n) for n in raw]
    # Called once, in the worker, after the commit: a fresh transaction already found it
    assert notes == [
        {
            "id": interrupt.id,
            "name": "approve",
            "visible": "pending",
            "pid": notes[0]["pid"],
            "previous_input": None,
        }
    ]
    assert notes[0]["pid"] != os.getpid()


def test_a_worker_serves_only_its_own_step_metrics(
    db: str, own_broker: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a worker (a prefork pool: its child executes the steps) started with
    # INTERLUDE_METRICS_PORT, on a broker of its own so that it executes this test's run
    port = free_port()
    start_worker("-c", "1", INTERLUDE_METRICS_PORT=str(port))
    run_id = enqueue_run("three_steps", {})
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=60)
    # When Prometheus scrapes the worker, once it counted the last step (the pool child counts
    # a step after its commit, which the run's state already shows)
    last = "interlude_steps_total{flow=three_steps,outcome=completed,step=third}"
    samples = wait_for(lambda: _scraped_with(port, last), timeout=30)
    # Then it counts the steps its pool executed, with their durations
    steps = {k: v for k, v in samples.items() if k.startswith("interlude_steps_total{")}
    assert steps == {
        "interlude_steps_total{flow=three_steps,outcome=advanced,step=first}": 1,
        "interlude_steps_total{flow=three_steps,outcome=advanced,step=second}": 1,
        "interlude_steps_total{flow=three_steps,outcome=completed,step=third}": 1,
    }
    assert samples["interlude_step_duration_seconds_count{flow=three_steps,step=third}"] == 1
    # And none of the whole database's figures: those come from `interlude metrics` alone, so
    # that adding up the workers counts nothing twice
    global_names = ("interlude_stats_up", "interlude_waiting_runs", "interlude_runs{")
    assert not [name for name in samples if name.startswith(global_names)]


def _scraped_with(port: int, name: str) -> dict[str, float] | None:
    samples = _try_scrape(port)
    return samples if samples is not None and name in samples else None


def _try_scrape(port: int) -> dict[str, float] | None:
    try:
        return scrape(port)
    except OSError:
        return None
