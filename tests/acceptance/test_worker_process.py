"""What only a real worker process shows: it calls the notifiers, and serves the metrics."""

from __future__ import annotations

import json
import os
from collections.abc import Callable

from tests.flows.interrupts import scratch_redis
from tests.integration.test_stats import free_port, scrape
from tests.resumes import wait_pending
from tests.services import WorkerProcess, wait_for
from worker import enqueue_run


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
        {"id": interrupt.id, "name": "approve", "visible": "pending", "pid": notes[0]["pid"]}
    ]
    assert notes[0]["pid"] != os.getpid()


def test_a_worker_serves_the_metrics_when_asked(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    # Given a waiting-free database and a worker started with INTERLUDE_METRICS_PORT
    port = free_port()
    start_worker("-c", "1", INTERLUDE_METRICS_PORT=str(port))
    # When Prometheus scrapes it
    samples = wait_for(lambda: _try_scrape(port), timeout=30)
    # Then the worker answers with interlude's figures
    assert samples["interlude_stats_up"] == 1
    assert samples["interlude_waiting_runs{kind=approval}"] == 0
    assert "interlude_steps_reexecuted_total" in samples


def _try_scrape(port: int) -> dict[str, float] | None:
    try:
        return scrape(port)
    except OSError:
        return None
