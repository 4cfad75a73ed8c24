"""``collect_stats()`` on a known set of runs, and the same figures as Prometheus metrics."""

from __future__ import annotations

import socket
import urllib.request
import uuid
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from examples import procurement, records
from models import events as event_store
from models.db import transaction, utcnow
from models.enums import InterruptKind, ResumeOutcome, RunState
from models.storable import new_id
from models.tables import Interrupt, ResumeAttempt, Run
from worker import ResumeContract, add_actor, enqueue_run, get_run, submit_resume
from worker.ops import step_metrics
from worker.ops.stats import collect_stats, start_metrics_server
from worker.testing import TaskRecorder

# Slack for the time between writing the rows and reading the figures (never a duration check).
SLACK = 60.0


def _run(session: Any, state: str) -> str:
    now = utcnow()
    run = Run(
        id=new_id(),
        flow_name="stats_probe",
        flow_version=1,
        input={},
        state=state,
        state_version=1,
        next_step="only",
        created_at=now,
        updated_at=now,
    )
    session.add(run)
    session.flush()
    return run.id


def _interrupt(
    session: Any, run_id: str, kind: str, age: float, status: str = "pending", version: int = 1
) -> None:
    created = utcnow() - timedelta(seconds=age)
    session.add(
        Interrupt(
            id=new_id(),
            run_id=run_id,
            name=f"{kind}-{uuid.uuid4().hex[:6]}",
            kind=kind,
            status=status,
            step="only",
            checkpoint_id="cp",
            state_version=version,
            flow_version=1,
            schema_name="approval",
            schema_version=1,
            json_schema={},
            roles=["approver"],
            evidence_hash="sha256:0",
            deadline=created + timedelta(days=1),
            on_expiry="expire",
            created_at=created,
        )
    )


def _attempt(session: Any, run_id: str | None, outcome: str) -> None:
    session.add(ResumeAttempt(at=utcnow(), run_id=run_id, outcome=outcome, reason="", payload={}))


def _event(session: Any, run_id: str, trigger: str, detail: dict[str, Any]) -> None:
    event_store.record_event(session, run_id, actor="worker:test", kind=trigger, detail=detail)


def test_figures_of_a_known_set_of_runs(db: str) -> None:
    # Given four runs waiting 1000 s, 300 s, 200 s and 100 s: the second one's first interrupt
    # was escalated 50 s ago (the wait goes on), the fourth one waited once before (an older
    # wait, at an earlier state version); a queued run, and resumed runs that ended each way
    with transaction() as session:
        w1, w2, w3, w4 = (_run(session, RunState.WAITING) for _ in range(4))
        _interrupt(session, w1, "approval", 1000)
        _interrupt(session, w2, "approval", 300, status="expired")
        _interrupt(session, w2, "approval", 50)
        _interrupt(session, w3, "evidence", 200)
        _interrupt(session, w4, "repair", 100)
        _interrupt(session, w4, "approval", 5000, status="resolved", version=0)
        _run(session, RunState.QUEUED)
        succeeded, failed = _run(session, RunState.SUCCEEDED), _run(session, RunState.FAILED)
        # Resume attempts: two accepted that finished, one accepted now waiting again (w1),
        # three stale, one denied, one duplicate, one malformed (no run id)
        for run_id in (succeeded, failed, w1):
            _attempt(session, run_id, ResumeOutcome.ACCEPTED)
        for _ in range(3):
            _attempt(session, w2, ResumeOutcome.STALE)
        _attempt(session, failed, ResumeOutcome.DENIED)
        _attempt(session, succeeded, ResumeOutcome.DUPLICATE)
        _attempt(session, None, ResumeOutcome.MALFORMED)
        # Repeated work: two re-executions, effects skipped 2 + 3, one reconciled, one repair
        _event(session, succeeded, "step_reexecuted", {"step": "only", "executions": 2})
        _event(session, failed, "step_reexecuted", {"step": "only", "executions": 2})
        _event(session, succeeded, "effect_skipped", {"count": 2})
        _event(session, failed, "effect_skipped", {"count": 3})
        _event(session, w4, "effect_reconciled", {"count": 1})
        _event(session, w4, "repair_raised", {"count": 1})
        _event(session, w1, "claim", {})

    # When the figures are collected
    stats = collect_stats()

    # Then waits are counted by the kind of what they wait on now, and aged from their start
    assert stats.waiting_runs == 4
    assert stats.waiting_by_kind == {
        **{kind.value: 0 for kind in InterruptKind},
        "approval": 2,
        "evidence": 1,
        "repair": 1,
    }
    assert stats.oldest_waiting_age_seconds is not None
    assert 1000 <= stats.oldest_waiting_age_seconds < 1000 + SLACK
    # The median of 1000, 300, 200 and 100 is halfway between 200 and 300
    assert stats.median_waiting_age_seconds is not None
    assert 250 <= stats.median_waiting_age_seconds < 250 + SLACK
    # And resume attempts by outcome, with the share refused as stale
    assert stats.resume_attempts_total == 9
    assert {k: v for k, v in stats.resume_attempts.items() if v} == {
        "accepted": 3,
        "stale": 3,
        "denied": 1,
        "duplicate": 1,
        "malformed": 1,
    }
    assert stats.stale_rejection_rate == pytest.approx(3 / 9)
    # And resumed runs by where they are now
    assert (stats.resumed_succeeded, stats.resumed_failed) == (1, 1)
    assert stats.resumed_runs["waiting"] == 1
    # And repeated work, summing the counters
    assert stats.repeated_work.model_dump() == {
        "steps_reexecuted": 2,
        "effects_skipped": 5,
        "effects_reconciled": 1,
        "repairs_raised": 1,
    }
    # And runs by state (every state listed), the failed one by flow and step
    assert stats.runs_by_state == {
        **{state.value: 0 for state in RunState},
        "waiting": 4,
        "queued": 1,
        "succeeded": 1,
        "failed": 1,
    }
    assert stats.failed_runs == {"stats_probe": {"only": 1}}


def test_figures_of_an_empty_database(db: str) -> None:
    stats = collect_stats()
    assert stats.waiting_runs == 0
    assert set(stats.runs_by_state.values()) == {0}
    assert stats.failed_runs == {}
    assert set(stats.waiting_by_kind.values()) == {0}
    assert stats.oldest_waiting_age_seconds is None
    assert stats.median_waiting_age_seconds is None
    assert stats.resume_attempts_total == 0
    assert stats.stale_rejection_rate is None
    assert stats.repeated_work.model_dump() == dict.fromkeys(stats.repeated_work.model_dump(), 0)
    # The snapshot is a frozen value
    with pytest.raises(ValueError):
        stats.waiting_runs = 3  # type: ignore[misc]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def scrape(port: int) -> dict[str, float]:
    """Every sample of ``/metrics`` as ``name{label=value}`` -> value."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as response:
        text = response.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()))
            samples[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
    return samples


@pytest.fixture()
def example_tables(database_url: str) -> Iterator[None]:
    records.ensure_tables()
    yield
    records.drop_tables()


def test_a_real_story_in_the_figures_and_the_exporter(
    tasks: TaskRecorder, example_tables: None
) -> None:
    # Given a procurement run that waited, had its review renewed, and was certified
    credential = add_actor("eng.stats", ["engineer"])
    request_id = f"PR-{uuid.uuid4().hex[:8]}"
    procurement.submit_request(
        request_id, "acme-valves", [{"sku": "P-1", "quantity": 1, "unit_price": 10.0}]
    )
    run_id = enqueue_run("procurement", {"request_id": request_id})
    tasks.drain()
    first = get_run(run_id).pending_interrupts[0]
    waiting = collect_stats()
    assert (waiting.waiting_runs, waiting.waiting_by_kind["evidence"]) == (1, 1)
    procurement.amend_request(request_id, [{"sku": "P-1", "quantity": 2, "unit_price": 10.0}])
    certificate = {"certificate_id": "EC-1", "engineer": "E", "conclusion": "fit_for_purpose"}
    renewed = submit_resume(_contract(first, "eng.stats", certificate), credential)
    second = get_run(run_id).pending_interrupts[0]
    assert renewed.new_interrupt_id == second.id
    accepted = submit_resume(_contract(second, "eng.stats", certificate), credential)
    assert accepted.outcome == "accepted", accepted.reason
    tasks.drain()
    assert get_run(run_id).state == "succeeded"

    # When the figures are collected and scraped
    stats = collect_stats()
    server, _thread = start_metrics_server(free_port(), address="127.0.0.1")
    try:
        samples = scrape(server.server_port)
    finally:
        server.shutdown()
        server.server_close()

    # Then both tell the same story
    assert stats.waiting_runs == 0
    assert stats.resume_attempts["renewed_review_required"] == 1
    assert stats.resume_attempts["accepted"] == 1
    assert stats.stale_rejection_rate == 0
    assert stats.resumed_succeeded == 1
    # The certify step ran again after the wait and skipped the supplier check
    assert stats.repeated_work.effects_skipped == 1
    assert samples["interlude_stats_up"] == 1
    assert samples["interlude_waiting_runs{kind=evidence}"] == 0
    assert samples["interlude_resume_attempts_total{outcome=accepted}"] == 1
    assert samples["interlude_resume_attempts_total{outcome=renewed_review_required}"] == 1
    assert samples["interlude_resumed_runs{state=succeeded}"] == 1
    assert samples["interlude_effects_skipped_total"] == 1
    assert samples["interlude_resume_stale_ratio"] == 0


def _contract(interrupt: Any, actor: str, certificate: dict[str, Any]) -> ResumeContract:
    return ResumeContract.for_interrupt(interrupt, actor=actor, input=certificate)


def test_the_exporter_serves_runs_by_state_and_failed_runs(tasks: TaskRecorder) -> None:
    # Given a run that failed for good, one that succeeded and one that waits
    failed = enqueue_run("flaky", {"fail_times": 5})
    enqueue_run("three_steps", {})
    enqueue_run("approval", {})
    tasks.drain()
    assert get_run(failed).state == "failed"
    # When the exporter of the whole database is scraped
    server, _thread = start_metrics_server(free_port(), address="127.0.0.1")
    try:
        samples = scrape(server.server_port)
    finally:
        server.shutdown()
        server.server_close()
    # Then it has every state's count and the failed run under its flow and step
    assert {s: samples[f"interlude_runs{{state={s.value}}}"] for s in RunState} == {
        **{state: 0 for state in RunState},
        RunState.FAILED: 1,
        RunState.SUCCEEDED: 1,
        RunState.WAITING: 1,
    }
    assert samples["interlude_failed_runs{flow=flaky,step=sometimes}"] == 1
    # ... and no per-worker counter: steps are counted by the workers that execute them
    assert not [name for name in samples if name.startswith("interlude_steps_total")]


@pytest.fixture()
def counting() -> Iterator[Any]:
    """This process counts the steps it executes, in a registry of its own, as a worker does."""
    from prometheus_client import CollectorRegistry

    registry = CollectorRegistry()
    step_metrics.enable(registry)
    yield registry
    step_metrics.disable()


def test_a_worker_counts_the_steps_it_executes_by_outcome(
    tasks: TaskRecorder, counting: Any
) -> None:
    # Given a three-step run, one that waits, and one whose step fails three times
    enqueue_run("three_steps", {})
    enqueue_run("approval", {})
    enqueue_run("flaky", {"fail_times": 5})
    # When their steps are executed in this process
    tasks.drain()

    # Then each execution was counted under its flow, step and outcome
    def steps(flow: str, step: str, outcome: str) -> float | None:
        labels = {"flow": flow, "step": step, "outcome": outcome}
        value: float | None = counting.get_sample_value("interlude_steps_total", labels)
        return value

    assert steps("three_steps", "first", "advanced") == 1
    assert steps("three_steps", "second", "advanced") == 1
    assert steps("three_steps", "third", "completed") == 1
    assert steps("approval", "prepare", "advanced") == 1
    assert steps("approval", "gate", "waiting") == 1
    assert steps("flaky", "sometimes", "retrying") == 2
    assert steps("flaky", "sometimes", "failed") == 1
    # And the failures by the error's class, and one duration per execution
    failures = {"flow": "flaky", "step": "sometimes", "error": "RuntimeError"}
    assert counting.get_sample_value("interlude_step_failures_total", failures) == 3
    durations = {"flow": "flaky", "step": "sometimes"}
    assert counting.get_sample_value("interlude_step_duration_seconds_count", durations) == 3
    assert counting.get_sample_value("interlude_step_duration_seconds_sum", durations) > 0
    # And no figure of the whole database: summing workers must not count a run twice
    names = {metric.name for metric in counting.collect()}
    assert names == {
        "interlude_steps",
        "interlude_step_duration_seconds",
        "interlude_step_failures",
    }
