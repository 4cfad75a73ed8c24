"""bench.triples: LangGraph `sync`, the record floor and interlude, each triple's ratios."""

from __future__ import annotations

from typing import Any

from pytest import approx

from bench.compare import INTERLUDE, LG_SYNC, RECORD_FLOOR
from bench.triples import HEAD, above_floor, row, summary


def _one_lane(rate: float, cpu_ms: float, **seconds: float) -> dict[str, Any]:
    """A result as ``bench.w1 --cpu --json`` gives it on one lane: CPU seconds by role."""
    roles = {"caller": 0.0, "worker parent": 0.0, "worker children": 0.0, "postgres": 0.0}
    roles |= {role.replace("_", " "): spent for role, spent in seconds.items()}
    return {"runs": 1000, "rate": rate, "cpu_ms_per_run": cpu_ms, "cpu": roles}


def _lanes(rate: float, cpu_ms: float, **ms: float) -> dict[str, Any]:
    """A result as the lanes give it (``bench.lanes``): CPU ms per run by role."""
    roles = {"caller": 0.0, "worker parent": 0.0, "worker children": 0.0, "postgres": 0.0}
    roles |= {role.replace("_", " "): spent for role, spent in ms.items()}
    return {"runs": 1000, "rate": rate, "cpu_ms_per_run": cpu_ms, "cpu_ms_per_run_by_role": roles}


def _triple(lg_cpu: float, floor_cpu: float, ours_cpu: float) -> dict[str, dict[str, Any]]:
    return {
        LG_SYNC: _lanes(100.0, lg_cpu, caller=lg_cpu),
        RECORD_FLOOR: _one_lane(200.0, floor_cpu, caller=1.5, worker_parent=2.0, postgres=3.0),
        INTERLUDE: _one_lane(150.0, ours_cpu, caller=2.5, worker_parent=3.5, postgres=3.25),
    }


def test_above_the_floor_reads_seconds_on_one_lane_as_ms_a_run() -> None:
    floor = _one_lane(200.0, 7.0, caller=1.5, worker_parent=2.0, postgres=3.0)
    ours = _one_lane(150.0, 9.5, caller=2.5, worker_parent=3.5, postgres=3.25)
    assert above_floor(ours, floor) == approx({"caller": 1.0, "worker": 1.5, "postgres": 0.25})


def test_above_the_floor_counts_a_workers_children_with_it_on_the_whole_machine() -> None:
    floor = _lanes(200.0, 7.0, caller=1.5, worker_parent=1.0, worker_children=1.0, postgres=3.0)
    ours = _lanes(150.0, 9.5, caller=2.0, worker_parent=2.0, worker_children=1.5, postgres=2.5)
    assert above_floor(ours, floor) == approx({"caller": 0.5, "worker": 1.5, "postgres": -0.5})


def test_a_row_says_each_ratio_against_langgraph() -> None:
    said = row(2, _triple(lg_cpu=10.0, floor_cpu=7.0, ours_cpu=9.5))
    assert said == (
        "| 2 | 100.0 runs/s, 10.00 ms | 200.0 runs/s, 7.00 ms (0.70; 2.00)"
        " | 150.0 runs/s, 9.50 ms (0.95; 1.50) | +1.00; +1.50; +0.25 ms |"
    )
    assert said.count("|") == HEAD.splitlines()[0].count("|")


def test_the_summary_gives_each_ratios_range_and_median() -> None:
    triples = [_triple(10.0, 6.0, 8.0), _triple(10.0, 7.0, 11.0), _triple(8.0, 6.0, 6.0)]
    assert summary(triples) == (
        "Over 3 triples, CPU per run ÷ LangGraph `sync`'s: the record floor 0.60 to 0.75"
        " (median 0.70), interlude 0.75 to 1.10 (median 0.80); rate ÷ LangGraph's: the record"
        " floor 2.00 to 2.00 (median 2.00), interlude 1.50 to 1.50 (median 1.50)."
    )
