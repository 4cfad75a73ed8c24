"""Per-worker metrics: the steps this worker executed, how long they took, how they failed.

A worker counts only what it did itself, so figures summed across workers are true; the figures
of the whole database (waiting runs, runs by state, ...) come from one exporter,
``interlude metrics`` (``worker.ops.stats``). Counting is off until ``enable()``: a worker started
with ``INTERLUDE_METRICS_PORT`` enables it before its pool starts (``prepare_worker``), and
its pool's processes then count into files that the worker's exporter adds up (prometheus_client's
multiprocess mode), whatever the pool: prefork children, threads or solo.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
import tempfile
from enum import StrEnum
from typing import Any

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
# Agent steps wait on models and tools: seconds to minutes, as well as milliseconds.
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class StepOutcome(StrEnum):
    """How one execution of a step ended (the ``outcome`` label of ``interlude_steps_total``)."""

    ADVANCED = "advanced"  # committed; the run moves on to its next step
    COMPLETED = "completed"  # committed; it was the run's last step
    WAITING = "waiting"  # suspended on an interrupt
    RETRYING = "retrying"  # failed; another attempt is due
    FAILED = "failed"  # failed for good: the run failed
    DISCARDED = "discarded"  # this worker had lost the run; nothing of the step was kept
    RELEASED = "released"  # a transient database error: the run was given back, due at once


class StepMetrics:
    """The per-worker counters and histogram, registered in ``registry``."""

    def __init__(self, registry: Any) -> None:
        from prometheus_client import Counter, Histogram

        self.registry = registry
        self.steps = Counter(
            "interlude_steps",
            "Step executions of this worker, by flow, step and outcome",
            ["flow", "step", "outcome"],
            registry=registry,
        )
        self.duration = Histogram(
            "interlude_step_duration_seconds",
            "Time from a step's start to its commit, in this worker",
            ["flow", "step"],
            buckets=DURATION_BUCKETS,
            registry=registry,
        )
        self.failures = Counter(
            "interlude_step_failures",
            "Failed step executions of this worker (retried or not), by the error's class",
            ["flow", "step", "error"],
            registry=registry,
        )

    def observe(
        self, flow: str, step: str, outcome: StepOutcome, seconds: float, error: str | None
    ) -> None:
        self.steps.labels(flow, step, outcome.value).inc()
        self.duration.labels(flow, step).observe(seconds)
        if error is not None:
            self.failures.labels(flow, step, error).inc()


_active: StepMetrics | None = None
# The folder of this worker's multiprocess files, when this module made it (removed at exit).
_folder: str | None = None


def enable(registry: Any = None) -> StepMetrics:
    """Count the steps this process executes from now on, in ``registry`` (a new one if None)."""
    global _active
    from prometheus_client import CollectorRegistry

    _active = StepMetrics(registry if registry is not None else CollectorRegistry())
    return _active


def disable() -> None:
    global _active
    _active = None


def observe(
    flow: str, step: str, outcome: StepOutcome, seconds: float, error: str | None = None
) -> None:
    """Count one step execution (nothing when counting is off)."""
    if _active is not None:
        _active.observe(flow, step, outcome, seconds, error)


# --- a worker's exporter ---------------------------------------------------------------------


def prepare_worker(port: int) -> None:
    """Before the pool starts: count in multiprocess files, so that every process's steps count.

    The mode has to be chosen before the first metric is made; the pool's processes inherit it.
    """
    global _folder
    if not port:
        return
    if not os.environ.get(MULTIPROC_ENV):
        _folder = tempfile.mkdtemp(prefix="interlude-metrics-")
        os.environ[MULTIPROC_ENV] = _folder
    if "prometheus_client.values" in sys.modules:
        # Imported before the mode was chosen (by a flow module, say): choose it again.
        from prometheus_client import values

        values.ValueClass = values.get_value_class()  # type: ignore[no-untyped-call]
    enable()


def worker_registry() -> Any:
    """The registry a worker serves: the sum of its processes' files."""
    from prometheus_client import CollectorRegistry
    from prometheus_client.multiprocess import MultiProcessCollector

    registry = CollectorRegistry(auto_describe=False)
    MultiProcessCollector(registry, path=os.environ[MULTIPROC_ENV])  # type: ignore[no-untyped-call]
    return registry


def cleanup_worker(**_: Any) -> None:
    """At the worker's shutdown: remove the files this module made."""
    global _folder
    disable()
    if _folder is not None:
        shutil.rmtree(_folder, ignore_errors=True)
        _folder = None
