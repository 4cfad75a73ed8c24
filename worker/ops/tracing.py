"""Traces across waits (OpenTelemetry, optional): one run is one trace, whatever it waits for.

With ``INTERLUDE_TRACING=true`` and the ``tracing`` extra installed, each step execution is a
span, and so is each accepted answer. A run's spans share one trace whose id is the run's id
(a run id is 128 random bits, as a trace id is), under a root span context derived from it: a
step executed weeks after the one before it is in the same trace, without anything carried
across the wait. The ask and its answer are tied together: the step span that asked records
its context with the interrupt (``trace_parent``, written by the insert the wait commits
anyway), and the answer's span links to it and is preceded by a ``wait`` span covering the
time the run waited. The trace reads ask → wait → answer → act. Celery's own instrumentation
(``opentelemetry-instrumentation-celery``) traces the tasks themselves; a step span links to
its task's span. Off (the default), none of this costs anything but a flag test.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from models.settings import get_settings

log = logging.getLogger(__name__)
TRACER_NAME = "interlude"

try:  # the optional extra
    from opentelemetry import context as otel_context
    from opentelemetry import trace
    from opentelemetry.trace import Link, NonRecordingSpan, SpanContext, TraceFlags
except ImportError:  # pragma: no cover - exercised where the extra is missing
    trace = None  # type: ignore[assignment]


def enabled() -> bool:
    return trace is not None and get_settings().tracing


def instrument_celery() -> None:
    """Let Celery's own instrumentation trace the tasks (in each worker process)."""
    if not enabled():
        return
    try:
        from opentelemetry.instrumentation.celery import CeleryInstrumentor
    except ImportError:
        log.warning("INTERLUDE_TRACING is on but opentelemetry-instrumentation-celery is missing")
        return
    CeleryInstrumentor().instrument()  # type: ignore[no-untyped-call]


def _run_context(run_id: str) -> Any:
    """The context of a run's root: its trace id is the run's id."""
    trace_id = int(run_id[:32], 16) if len(run_id) >= 32 else abs(hash(run_id)) or 1
    root = SpanContext(
        trace_id=trace_id,
        span_id=(trace_id & 0xFFFFFFFFFFFFFFFF) or 1,
        is_remote=True,
        trace_flags=TraceFlags(TraceFlags.SAMPLED),
    )
    return trace.set_span_in_context(NonRecordingSpan(root))


def _traceparent(context: Any) -> str:
    return f"00-{context.trace_id:032x}-{context.span_id:016x}-{int(context.trace_flags):02x}"


def _parse(traceparent: str | None) -> Any:
    try:
        _, trace_id, span_id, flags = (traceparent or "").split("-")
        return SpanContext(
            trace_id=int(trace_id, 16),
            span_id=int(span_id, 16),
            is_remote=True,
            trace_flags=TraceFlags(int(flags, 16)),
        )
    except ValueError:
        return None


class StepSpan:
    """The span of one step execution (a no-op when tracing is off)."""

    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, key: str, value: Any) -> None:
        if self._span is not None:
            self._span.set_attribute(key, value)

    @property
    def traceparent(self) -> str | None:
        """This span's context, to be kept with an interrupt it asks (``trace_parent``)."""
        return None if self._span is None else _traceparent(self._span.get_span_context())


@contextmanager
def step_span(run_id: str, flow: str, step: str, *, resuming: bool) -> Iterator[StepSpan]:
    if not enabled():
        yield StepSpan(None)
        return
    task = trace.get_current_span().get_span_context()
    links = [Link(task)] if task.is_valid else []
    tracer = trace.get_tracer(TRACER_NAME)
    with tracer.start_as_current_span(
        f"interlude.step {flow}.{step}",
        context=_run_context(run_id),
        links=links,
        attributes={
            "interlude.run_id": run_id,
            "interlude.flow": flow,
            "interlude.step": step,
            "interlude.resuming": resuming,
        },
    ) as span:
        yield StepSpan(span)


def answered(
    run_id: str,
    interrupt_id: str,
    name: str,
    asked_at: datetime,
    ask: str | None,
    actor: str,
    outcome: str,
) -> Any:
    """Spans of an accepted answer: the wait since the ask, then the answer, linked to the
    ask's span. Returns a context under which the resumed step's task is published."""
    if not enabled():
        return None
    tracer = trace.get_tracer(TRACER_NAME)
    root = _run_context(run_id)
    asked = _parse(ask)
    links = [Link(asked)] if asked is not None else []
    waited = tracer.start_span(
        f"interlude.wait {name}",
        context=root,
        links=links,
        start_time=int(asked_at.timestamp() * 1e9),
        attributes={"interlude.run_id": run_id, "interlude.interrupt_id": interrupt_id},
    )
    waited.end()
    with tracer.start_as_current_span(
        f"interlude.answer {name}",
        context=root,
        links=[*links, Link(waited.get_span_context())],
        attributes={
            "interlude.run_id": run_id,
            "interlude.interrupt_id": interrupt_id,
            "interlude.actor": actor,
            "interlude.outcome": outcome,
        },
    ):
        return otel_context.get_current()


@contextmanager
def within(context: Any) -> Iterator[None]:
    """Publish under ``context`` (Celery's instrumentation carries it to the task)."""
    if context is None:
        yield
        return
    token = otel_context.attach(context)
    try:
        yield
    finally:
        otel_context.detach(token)
