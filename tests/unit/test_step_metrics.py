"""Per-worker step metrics: counted only when enabled, summed over a worker's processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from tests.services import ROOT
from worker.ops import step_metrics
from worker.ops.step_metrics import StepOutcome


@pytest.fixture()
def registry() -> Iterator[CollectorRegistry]:
    registry = CollectorRegistry()
    step_metrics.enable(registry)
    yield registry
    step_metrics.disable()


def test_nothing_is_counted_until_enabled() -> None:
    # A process that serves no metrics (the CLI, tests, a worker without a port) counts nothing
    step_metrics.observe("f", "s", StepOutcome.COMPLETED, 0.1)
    registry = CollectorRegistry()
    step_metrics.enable(registry)
    step_metrics.disable()
    step_metrics.observe("f", "s", StepOutcome.COMPLETED, 0.1)
    assert registry.get_sample_value("interlude_steps_total", _labels("completed")) is None


def test_an_execution_counts_its_outcome_duration_and_failure(registry: CollectorRegistry) -> None:
    step_metrics.observe("f", "s", StepOutcome.RETRYING, 0.2, "TimeoutError")
    step_metrics.observe("f", "s", StepOutcome.FAILED, 0.3, "TimeoutError")
    step_metrics.observe("f", "s", StepOutcome.COMPLETED, 0.5)
    assert registry.get_sample_value("interlude_steps_total", _labels("retrying")) == 1
    assert registry.get_sample_value("interlude_steps_total", _labels("failed")) == 1
    assert registry.get_sample_value("interlude_steps_total", _labels("completed")) == 1
    failures = {"flow": "f", "step": "s", "error": "TimeoutError"}
    assert registry.get_sample_value("interlude_step_failures_total", failures) == 2
    step = {"flow": "f", "step": "s"}
    assert registry.get_sample_value("interlude_step_duration_seconds_count", step) == 3
    assert registry.get_sample_value("interlude_step_duration_seconds_sum", step) == pytest.approx(
        1.0
    )
    bucket = dict(step, le="0.25")
    assert registry.get_sample_value("interlude_step_duration_seconds_bucket", bucket) == 1


def test_a_worker_serves_the_sum_of_its_pool_processes() -> None:
    # Given a worker process prepared for metrics, whose pool children (forked, as prefork's
    # are) execute steps, one of them replaced by another, as a pool recycles its children
    script = textwrap.dedent(
        """
        import os
        from worker.ops import step_metrics
        from worker.ops.step_metrics import StepOutcome

        step_metrics.prepare_worker(9999)
        for child in range(2):
            pid = os.fork()
            if pid == 0:
                for _ in range(child + 2):
                    step_metrics.observe("f", "s", StepOutcome.ADVANCED, 0.01)
                os._exit(0)
            os.waitpid(pid, 0)
        # When the worker (the parent, which executed nothing) reads its registry
        registry = step_metrics.worker_registry()
        labels = {"flow": "f", "step": "s", "outcome": "advanced"}
        print(registry.get_sample_value("interlude_steps_total", labels))
        folder = os.environ["PROMETHEUS_MULTIPROC_DIR"]
        step_metrics.cleanup_worker()
        print(os.path.exists(folder))
        """
    )
    env = {"PATH": "/usr/bin:/bin", "INTERLUDE_BROKER_URL": "memory://"}
    done = subprocess.run(
        [sys.executable, "-c", script], cwd=ROOT, env=env, capture_output=True, text=True
    )
    # Then it serves the children's counts added up, and removes its files at shutdown
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["5.0", "False"]


def _labels(outcome: str) -> dict[str, str]:
    return {"flow": "f", "step": "s", "outcome": outcome}
