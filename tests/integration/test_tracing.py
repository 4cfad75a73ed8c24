"""Traces across a wait: one run, one trace — ask → wait → answer → act (SDK's in-memory
exporter, steps drained in-process)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from models.settings import reset_settings
from tests.resumes import contract_for, drain_finished, drain_pending
from worker import add_actor, enqueue_run, submit_resume
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")
_EXPORTER = InMemorySpanExporter()


@pytest.fixture()
def spans(monkeypatch: pytest.MonkeyPatch) -> Iterator[InMemorySpanExporter]:
    if not isinstance(trace.get_tracer_provider(), TracerProvider):
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_EXPORTER))
        trace.set_tracer_provider(provider)
    monkeypatch.setenv("INTERLUDE_TRACING", "true")
    reset_settings()
    _EXPORTER.clear()
    yield _EXPORTER
    monkeypatch.delenv("INTERLUDE_TRACING")
    reset_settings()


def test_a_run_is_one_trace_across_its_wait(
    db: str, tasks: TaskRecorder, spans: InMemorySpanExporter
) -> None:
    manager = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_refunds", {"mode": "remembered"})
    asked = drain_pending(run_id, "review_call")
    assert submit_resume(contract_for(asked, "mia"), manager).accepted
    assert drain_finished(run_id) == "succeeded"
    finished = {span.name: span for span in spans.get_finished_spans()}
    step_spans = [s for s in spans.get_finished_spans() if s.name.startswith("interlude.step")]
    # Every span of the run is in the trace whose id is the run's id
    assert {s.context.trace_id for s in spans.get_finished_spans()} == {int(run_id, 16)}
    assert len(step_spans) == 2  # the ask, and the act after the answer
    ask, act = step_spans
    assert ask.attributes["interlude.outcome"] == "waiting"
    assert act.attributes["interlude.outcome"] == "completed"
    # The answer links to the ask's span, after a wait span that covers the wait
    answer = finished["interlude.answer review_call"]
    wait = finished["interlude.wait review_call"]
    assert ask.context.span_id in {link.context.span_id for link in answer.links}
    assert wait.context.span_id in {link.context.span_id for link in answer.links}
    assert wait.start_time <= answer.start_time <= act.start_time
    assert answer.attributes["interlude.actor"] == "human:mia"
