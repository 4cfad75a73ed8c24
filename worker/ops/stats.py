"""Operational figures: who waits and for how long, how resumes went, how much work repeated.

``collect_stats()`` reads them with a handful of GROUP BY queries (their cost follows the
number of waiting runs and audit rows of interest, not the whole history of runs; the counts of
runs by state read the index on state). They describe the whole database, so one exporter serves
them to Prometheus: ``serve_metrics(port)`` (``interlude metrics``). A worker started with
``INTERLUDE_METRICS_PORT`` serves only what it did itself (``worker.ops.step_metrics``), so that
figures summed across workers count nothing twice.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from models import queries
from models.db import transaction, utcnow
from models.db_errors import describe
from models.enums import EventKind, ResumeOutcome, RunState
from models.settings import get_settings

log = logging.getLogger(__name__)

UP_HELP = "1 when the statistics could be read from the database, else 0"


class RepeatedWork(BaseModel):
    model_config = ConfigDict(frozen=True)

    steps_reexecuted: int = 0
    effects_skipped: int = 0
    effects_reconciled: int = 0
    repairs_raised: int = 0


class Stats(BaseModel):
    """A snapshot of the figures; ages are in seconds, None when nothing waits."""

    model_config = ConfigDict(frozen=True)

    waiting_runs: int
    waiting_by_kind: dict[str, int]
    oldest_waiting_age_seconds: float | None
    median_waiting_age_seconds: float | None
    resume_attempts: dict[str, int]
    resume_attempts_total: int
    # Share of all resume attempts refused as stale (None before the first attempt).
    stale_rejection_rate: float | None
    # Runs with an accepted resume, by the state they are in now.
    resumed_runs: dict[str, int]
    resumed_succeeded: int
    resumed_failed: int
    repeated_work: RepeatedWork
    # Runs in each state, and the failed ones by flow and by the step they failed in.
    runs_by_state: dict[str, int]
    failed_runs: dict[str, dict[str, int]]
    collected_at: datetime


def collect_stats() -> Stats:
    """Read the figures from the database, in one read-only transaction."""
    now = utcnow()
    with transaction(readonly=True) as session:
        waiting_runs = queries.waiting_count(session)
        by_kind = queries.waiting_by_kind(session)
        oldest, median = queries.waiting_since(session)
        attempts = queries.attempts_by_outcome(session)
        resumed = queries.resumed_runs(session)
        repeated = queries.repeated_work(session)
        by_state = queries.runs_by_state(session)
        failed = queries.failed_runs(session)
    total = sum(attempts.values())
    return Stats(
        waiting_runs=waiting_runs,
        waiting_by_kind=by_kind,
        oldest_waiting_age_seconds=_age(now, oldest),
        median_waiting_age_seconds=_age(now, median),
        resume_attempts=attempts,
        resume_attempts_total=total,
        stale_rejection_rate=attempts[ResumeOutcome.STALE.value] / total if total else None,
        resumed_runs=resumed,
        resumed_succeeded=resumed[RunState.SUCCEEDED.value],
        resumed_failed=resumed[RunState.FAILED.value],
        repeated_work=RepeatedWork(
            steps_reexecuted=repeated[EventKind.STEP_REEXECUTED],
            effects_skipped=repeated[EventKind.EFFECT_SKIPPED],
            effects_reconciled=repeated[EventKind.EFFECT_RECONCILED],
            repairs_raised=repeated[EventKind.REPAIR_RAISED],
        ),
        runs_by_state=by_state,
        failed_runs=failed,
        collected_at=now,
    )


def _age(now: datetime, since: datetime | None) -> float | None:
    return None if since is None else max(0.0, (now - since).total_seconds())


# --- Prometheus ------------------------------------------------------------------------------


class StatsCollector:
    """A Prometheus collector that reads ``collect_stats()`` at every scrape."""

    def describe(self) -> list[Any]:
        # Describing nothing keeps registration from scraping the database.
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        try:
            stats = collect_stats()
        except Exception as exc:
            # One line per scrape: the database may stay down for hours, scraped every 15 s.
            _log_failure(exc)
            yield GaugeMetricFamily(
                "interlude_stats_up", "1 when the statistics could be read", value=0
            )
            return
        yield GaugeMetricFamily(
            "interlude_stats_up", "1 when the statistics could be read", value=1
        )
        waiting = GaugeMetricFamily(
            "interlude_waiting_runs", "Runs waiting, by interrupt kind", labels=["kind"]
        )
        for kind, count in stats.waiting_by_kind.items():
            waiting.add_metric([kind], count)
        yield waiting
        yield GaugeMetricFamily(
            "interlude_waiting_age_oldest_seconds",
            "Age of the longest wait (0 when nothing waits)",
            value=stats.oldest_waiting_age_seconds or 0.0,
        )
        yield GaugeMetricFamily(
            "interlude_waiting_age_median_seconds",
            "Median age of the waits (0 when nothing waits)",
            value=stats.median_waiting_age_seconds or 0.0,
        )
        attempts = CounterMetricFamily(
            "interlude_resume_attempts", "Resume attempts, by outcome", labels=["outcome"]
        )
        for outcome, count in stats.resume_attempts.items():
            attempts.add_metric([outcome], count)
        yield attempts
        yield GaugeMetricFamily(
            "interlude_resume_stale_ratio",
            "Share of resume attempts refused as stale (0 before the first attempt)",
            value=stats.stale_rejection_rate or 0.0,
        )
        resumed = GaugeMetricFamily(
            "interlude_resumed_runs", "Runs with an accepted resume, by state now", labels=["state"]
        )
        for state, count in stats.resumed_runs.items():
            resumed.add_metric([state], count)
        yield resumed
        for name, help_text, value in (
            ("steps_reexecuted", "Step executions beyond the first", "steps_reexecuted"),
            ("effects_skipped", "Effects found applied and not repeated", "effects_skipped"),
            ("effects_reconciled", "Effects of unknown outcome settled", "effects_reconciled"),
            ("repairs_raised", "Effects handed to an operator as repairs", "repairs_raised"),
        ):
            yield CounterMetricFamily(
                f"interlude_{name}", help_text, value=getattr(stats.repeated_work, value)
            )
        runs = GaugeMetricFamily("interlude_runs", "Runs, by state", labels=["state"])
        for state, count in stats.runs_by_state.items():
            runs.add_metric([state], count)
        yield runs
        failed = GaugeMetricFamily(
            "interlude_failed_runs",
            "Failed runs, by flow and by the step they failed in",
            labels=["flow", "step"],
        )
        for flow, steps in stats.failed_runs.items():
            for step, count in steps.items():
                failed.add_metric([flow, step], count)
        yield failed


def _log_failure(exc: Exception) -> None:
    """One WARNING line naming the error's class (the driver's, if any) and what it says."""
    cause = getattr(exc, "orig", None) or exc
    lines = str(exc).strip().splitlines()
    said = describe(exc) or (lines[0] if lines else "no detail")
    log.warning(
        "collecting statistics failed: %s: %s",
        type(cause).__name__,
        said,
        extra={"action": "stats_failed"},
    )
    log.debug("collecting statistics failed", exc_info=exc, extra={"action": "stats_failed"})


def metrics_registry() -> Any:
    """The figures of the whole database, read at every scrape."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry(auto_describe=False)
    registry.register(StatsCollector())
    return registry


def start_metrics_server(
    port: int, address: str | None = None, registry: Any = None
) -> tuple[Any, threading.Thread]:
    """Serve ``/metrics`` on ``port`` from a daemon thread; returns (server, thread).

    ``address`` defaults to ``INTERLUDE_METRICS_HOST`` (127.0.0.1: this machine only),
    ``registry`` to the figures of the whole database (``metrics_registry()``).
    """
    from prometheus_client import start_http_server

    address = get_settings().metrics_host if address is None else address
    registry = registry if registry is not None else metrics_registry()
    server, thread = start_http_server(port, addr=address, registry=registry)
    log.info("metrics on %s:%d", address, port, extra={"action": "metrics_started"})
    return server, thread


def metrics_text() -> str:
    """The figures of the whole database in Prometheus' text format, as a scrape would get
    them (``interlude metrics --once``)."""
    from prometheus_client import generate_latest

    return generate_latest(metrics_registry()).decode()


def serve_metrics(
    port: int, address: str | None = None, on_ready: Callable[[], None] | None = None
) -> None:
    """Serve the Prometheus exporter on ``port`` until interrupted (``interlude metrics``).

    OSError before anything is served (a port in use, a host that does not resolve);
    ``on_ready`` is called once the socket is bound, to announce it."""
    server, thread = start_metrics_server(port, address)
    if on_ready is not None:
        on_ready()
    try:
        thread.join()
    finally:
        server.shutdown()
        server.server_close()


def serve_from_worker(**_: Any) -> None:
    """A worker started with ``INTERLUDE_METRICS_PORT`` serves its own step metrics.

    Only what this worker did (``worker.ops.step_metrics``): the figures of the whole database come
    from ``interlude metrics`` alone, so that summing across workers counts nothing twice.
    """
    port = get_settings().metrics_port
    if not port:
        return
    from worker.ops.step_metrics import worker_registry

    try:
        start_metrics_server(port, registry=worker_registry())
    except OSError as exc:
        # Two workers on one host cannot share the port; the worker keeps working without it.
        log.error("cannot serve metrics on port %d: %s", port, exc, extra={"action": "metrics"})
