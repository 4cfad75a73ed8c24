"""Where a W4 run's slots go idle: a trace recorded inside the worker (``--trace``).

Imported in the worker process (``bench.w4`` adds it to the flow modules, ``bench.w4_floor``
imports it), it records, from Celery's signals, when each task message was received by the
worker's main thread and when each task started and ended on which pool thread, and from
``gc.callbacks`` how long each garbage collection held the process; it writes them to
``BENCH_TRACE_FILE`` (JSON) when the worker shuts down. ``summary`` reads that file back:

- busy slots every 50 ms from the first task's start (the ideal is the concurrency, always);
- how long the main thread took to receive the first ``concurrency`` messages (the ramp);
- the mean duration of a task (two 200 ms sleeps: 400 ms at best);
- how long a pool thread waited for its next task after one ended (the refill), by mean and
  maximum;
- the collections by generation during the run, their total and longest time.

Times come from inside the worker, so they cost it a little: read them as shapes, and take
the efficiency from a run without ``--trace``.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import tempfile
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

from celery import signals

TRACE_FILE_ENV = "BENCH_TRACE_FILE"
BUCKET_SECONDS = 0.05

_events: list[tuple[str, float, str, int]] = []  # (kind, time, task id, thread)
_collections: list[tuple[int, float, float]] = []  # (generation, time, seconds)
_collecting: dict[str, float] = {}


def _received(request: Any = None, **_: Any) -> None:
    _events.append(("received", time.time(), str(getattr(request, "id", "")), 0))


def _started(task_id: str | None = None, **_: Any) -> None:
    _events.append(("started", time.time(), str(task_id), threading.get_ident()))


def _ended(task_id: str | None = None, **_: Any) -> None:
    _events.append(("ended", time.time(), str(task_id), threading.get_ident()))


def _collection(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _collecting["at"] = time.perf_counter()
    elif "at" in _collecting:
        took = time.perf_counter() - _collecting["at"]
        _collections.append((int(info["generation"]), time.time(), took))


def _write(**_: Any) -> None:
    path = os.environ.get(TRACE_FILE_ENV)
    if path:
        Path(path).write_text(json.dumps({"events": _events, "collections": _collections}))


def new_file() -> Path:
    """A fresh path for a worker's trace."""
    return Path(tempfile.mkdtemp(prefix="bench-w4-trace-")) / "trace.json"


def worker_env(env: dict[str, str], path: Path | None, *, flows: bool) -> dict[str, str]:
    """``env`` for a worker that records its trace into ``path`` (``env`` itself when None);
    with ``flows``, an interlude worker, which imports this module as one of its flow modules."""
    if path is None:
        return env
    traced = {**env, TRACE_FILE_ENV: str(path)}
    if flows:
        traced["INTERLUDE_FLOWS"] = ",".join(
            m for m in (env.get("INTERLUDE_FLOWS", ""), __name__) if m
        )
    return traced


def install() -> None:
    """Start recording in this process (a worker), if ``BENCH_TRACE_FILE`` names a file."""
    if not os.environ.get(TRACE_FILE_ENV):
        return
    signals.task_received.connect(_received, weak=False)
    signals.task_prerun.connect(_started, weak=False)
    signals.task_postrun.connect(_ended, weak=False)
    signals.worker_shutting_down.connect(_write, weak=False)
    gc.callbacks.append(_collection)


def summary(path: Path, concurrency: int) -> dict[str, Any]:
    """The trace a worker wrote to ``path``, summed up (see the module's docstring)."""
    recorded = json.loads(path.read_text())
    events = recorded["events"]
    starts = [at for kind, at, _, _ in events if kind == "started"]
    if not starts:
        raise RuntimeError(f"no task started in the trace {path}")
    origin = min(starts)
    by_task: dict[str, dict[str, float]] = {}
    by_thread: dict[int, list[tuple[float, str]]] = {}
    for kind, at, task, thread in events:
        by_task.setdefault(task, {})[kind] = at - origin
        if kind in ("started", "ended"):
            by_thread.setdefault(thread, []).append((at - origin, kind))
    spans = [
        (t["started"], t["ended"]) for t in by_task.values() if "started" in t and "ended" in t
    ]
    end = max(e for _, e in spans)
    busy = [
        sum(1 for s, e in spans if s <= i * BUCKET_SECONDS < e)
        for i in range(int(end / BUCKET_SECONDS) + 1)
    ]
    received = sorted(t["received"] for t in by_task.values() if "received" in t)
    refills = []
    for marks in by_thread.values():
        marks.sort()
        refills += [
            b[0] - a[0] for a, b in pairwise(marks) if a[1] == "ended" and b[1] == "started"
        ]
    # (only those during the run: start-up's are not on the clock)
    during = [(g, took) for g, at, took in recorded["collections"] if at >= origin]
    collections: dict[str, Any] = {}
    for generation in sorted({g for g, _ in during}):
        times = [took for g, took in during if g == generation]
        collections[f"gen{generation}"] = {
            "count": len(times),
            "total_ms": sum(times) * 1000,
            "longest_ms": max(times) * 1000,
        }
    first = received[:concurrency]
    return {
        "busy_slots": busy,
        "idle_slot_seconds": sum(concurrency - b for b in busy) * BUCKET_SECONDS,
        "first_messages_ms": (first[-1] - first[0]) * 1000 if first else None,
        "task_ms": statistics.mean(e - s for s, e in spans) * 1000,
        "refill_ms": (statistics.mean(refills) * 1000, max(refills) * 1000) if refills else None,
        "collections": collections,
    }


def describe(traced: dict[str, Any], concurrency: int) -> str:
    """``summary``'s figures, a few lines of text."""
    lines = [
        f"trace: busy slots every {BUCKET_SECONDS * 1000:.0f} ms: "
        + " ".join(str(b) for b in traced["busy_slots"]),
        f"  idle slot-seconds {traced['idle_slot_seconds']:.1f}; first {concurrency} messages "
        f"received in {traced['first_messages_ms']:.0f} ms; a task took "
        f"{traced['task_ms']:.1f} ms on average",
    ]
    if traced["refill_ms"] is not None:
        mean, longest = traced["refill_ms"]
        lines.append(f"  a thread waited {mean:.1f} ms for its next task (longest {longest:.0f})")
    for generation, c in traced["collections"].items():
        lines.append(
            f"  {generation} collections: {c['count']}, {c['total_ms']:.1f} ms in all, "
            f"longest {c['longest_ms']:.1f} ms"
        )
    return "\n".join(lines)


install()
