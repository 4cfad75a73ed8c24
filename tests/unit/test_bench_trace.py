"""bench.w4_trace: a worker's W4 trace summed up (busy slots, ramp, refills, collections)."""

from __future__ import annotations

import json
from pathlib import Path

from pytest import approx

from bench.w4_trace import TRACE_FILE_ENV, describe, summary, worker_env

T0 = 1_000.0  # the first task's start


def _trace(tmp_path: Path) -> Path:
    # Two slots: thread 1 runs task a then, 0.1 s later, task c; thread 2 runs task b once.
    events = [
        ("received", T0 - 0.01, "a", 0),
        ("received", T0 + 0.03, "b", 0),
        ("received", T0 + 0.20, "c", 0),
        ("started", T0, "a", 1),
        ("started", T0 + 0.05, "b", 2),
        ("ended", T0 + 0.40, "a", 1),
        ("ended", T0 + 0.44, "b", 2),
        ("started", T0 + 0.50, "c", 1),
        ("ended", T0 + 0.90, "c", 1),
    ]
    collections = [
        (2, T0 - 5, 0.080),  # start-up's collection: before the clock, left out
        (0, T0 + 0.1, 0.001),
        (2, T0 + 0.3, 0.120),
        (0, T0 + 0.6, 0.002),
    ]
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"events": events, "collections": collections}))
    return path


def test_busy_slots_count_the_tasks_running_at_each_tick(tmp_path: Path) -> None:
    traced = summary(_trace(tmp_path), concurrency=2)
    busy = traced["busy_slots"]
    assert busy[0] == 1  # only a at 0 ms
    assert busy[1] == 2  # a and b at 50 ms
    assert busy[8] == 1  # b alone at 400 ms
    assert busy[9] == 0  # nothing at 450 ms: b ended at 440, c starts at 500
    assert busy[10] == 1
    # idle: the ideal keeps both slots busy at every tick
    assert traced["idle_slot_seconds"] == approx((2 * len(busy) - sum(busy)) * 0.05)


def test_the_ramp_refills_and_tasks_are_timed_from_the_trace(tmp_path: Path) -> None:
    traced = summary(_trace(tmp_path), concurrency=2)
    assert traced["first_messages_ms"] == approx(40)  # a at -10 ms, b at 30 ms
    assert traced["task_ms"] == approx((400 + 390 + 400) / 3)
    assert traced["refill_ms"] == approx((100, 100))  # thread 1: a ended at 400, c began at 500


def test_only_the_collections_during_the_run_count(tmp_path: Path) -> None:
    traced = summary(_trace(tmp_path), concurrency=2)
    assert traced["collections"] == {
        "gen0": {"count": 2, "total_ms": approx(3), "longest_ms": approx(2)},
        "gen2": {"count": 1, "total_ms": approx(120), "longest_ms": approx(120)},
    }
    text = describe(traced, 2)
    assert "gen2 collections: 1, 120.0 ms in all, longest 120.0 ms" in text
    assert "first 2 messages received in 40 ms" in text


def test_an_interlude_worker_loads_the_recorder_as_a_flow_module(tmp_path: Path) -> None:
    path = tmp_path / "t.json"
    env = worker_env({"INTERLUDE_FLOWS": "bench.flows"}, path, flows=True)
    assert env["INTERLUDE_FLOWS"] == "bench.flows,bench.w4_trace"
    assert env[TRACE_FILE_ENV] == str(path)
    assert "INTERLUDE_FLOWS" not in worker_env({}, path, flows=False)
    # ...and a worker that is not traced gets its environment as it was
    untraced = {"INTERLUDE_FLOWS": "bench.flows"}
    assert worker_env(untraced, None, flows=True) is untraced
