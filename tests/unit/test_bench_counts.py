"""bench.compare's arithmetic: per-run counts (start-up apart), the hop plus the work, and
the CPU by process."""

from __future__ import annotations

from typing import Any

from pytest import approx

from bench.compare import (
    COMMITS,
    DURABLE_FLOOR,
    FLOOR,
    IN_PROCESS,
    INTERLUDE,
    LG_SYNC,
    RECORD_FLOOR,
    above_the_record_floor,
    by_process_table,
    cpu_floor,
    header,
    hop_plus_work,
    per_run_and_start_up,
)
from bench.cpu import ROLES


def _per_run(runs: int, start_up: float, each: float) -> dict[str, float]:
    """What a counting run of ``runs`` reports: its totals divided by ``runs``."""
    total = start_up + runs * each
    return {"transactions": total / runs, "pings": 0.0, "statements": 2 * total / runs}


def test_the_start_up_of_the_processes_is_not_counted_as_the_cost_of_a_run() -> None:
    # 8 transactions per run and 13 once (the connections' set-up): 200 runs report 8.065.
    costs = per_run_and_start_up(200, _per_run(200, 13, 8), _per_run(400, 13, 8))

    assert costs["per_run"]["transactions"] == approx(8)
    assert costs["per_run"]["statements"] == approx(16)
    assert costs["start_up"]["transactions"] == approx(13)
    assert costs["start_up"]["statements"] == approx(26)
    assert costs["per_run"]["pings"] == approx(0)


def test_a_cost_that_grows_with_the_runs_stays_in_the_cost_of_a_run() -> None:
    costs = per_run_and_start_up(100, _per_run(100, 0, 8.5), _per_run(200, 0, 8.5))

    assert costs["per_run"]["transactions"] == approx(8.5)
    assert costs["start_up"]["transactions"] == approx(0)


def test_the_floor_and_the_own_work_add_up_per_run() -> None:
    # Celery alone at 250 runs/s (4 ms a run), interlude's work at 125 (8 ms): 12 ms, 83.3/s.
    rates = {INTERLUDE: [80.0, 81.0, 79.0], FLOOR: [250.0, 240.0, 260.0], IN_PROCESS: [125.0]}

    said = hop_plus_work(rates)

    assert said is not None
    assert "4.00 ms + 8.00 ms = 12.00 ms per run, 83.3 runs/s, against 80.0 measured" in said


def test_without_both_extra_rows_nothing_is_predicted() -> None:
    assert hop_plus_work({INTERLUDE: [80.0], FLOOR: [250.0]}) is None


def test_the_floor_of_a_runs_cpu_is_the_hop_and_the_commits_against_langgraph() -> None:
    # Medians: the hop 1.8 ms, the commits 1.1 ms, LangGraph sync 8.0 ms, interlude 9.0 ms.
    cpu = {
        INTERLUDE: [9.5, 9.0, 8.5],
        FLOOR: [1.8, 2.0, 1.7],
        COMMITS: [1.1],
        LG_SYNC: [8.0, 7.0, 9.0],
        IN_PROCESS: [5.5],
    }

    said = cpu_floor(cpu)

    assert said is not None
    assert "hop 1.80 ms + eight flushed commits 1.10 ms = 2.90 ms, 0.36 of" in said
    assert "`sync`'s 8.00 ms; interlude's 9.00 ms is 6.10 ms above it" in said


def test_the_durable_floor_is_said_beside_the_sum_when_measured() -> None:
    cpu = {
        INTERLUDE: [9.0],
        FLOOR: [1.8],
        COMMITS: [1.1],
        DURABLE_FLOOR: [4.0, 4.4, 3.9],
        LG_SYNC: [8.0],
    }

    said = cpu_floor(cpu)

    assert said is not None
    assert "cost 4.00 ms together, 0.50 of LangGraph `sync`'s" in said
    assert "interlude's own schema and code cost 5.00 ms above that." in said


def test_the_record_floor_says_what_interludes_python_costs_above_it() -> None:
    cpu = {
        INTERLUDE: [9.0],
        FLOOR: [1.8],
        COMMITS: [1.1],
        DURABLE_FLOOR: [4.0],
        RECORD_FLOOR: [6.6, 6.4, 7.0],
        LG_SYNC: [8.0],
    }

    said = cpu_floor(cpu)

    assert said is not None
    assert "none of its Python: 6.60 ms, 0.82 of LangGraph `sync`'s" in said
    assert "interlude's Python costs 2.40 ms above that." in said


def test_without_the_commits_row_no_floor_is_said() -> None:
    assert cpu_floor({INTERLUDE: [9.0], FLOOR: [1.8], LG_SYNC: [8.0]}) is None


def test_the_cpu_by_process_is_each_roles_median_over_the_rounds() -> None:
    def spent(caller: float, postgres: float) -> dict[str, float]:
        roles = dict.fromkeys(ROLES, 0.0)
        return {**roles, "caller": caller, "postgres": postgres}

    rounds = [spent(2.0, 3.0), spent(2.4, 2.8), spent(2.2, 9.0)]
    results = {
        INTERLUDE: [{"rate": 1.0, "cpu_ms_per_run_by_role": r} for r in rounds],
        LG_SYNC: [{"rate": 1.0}],  # measured without it: no row
    }

    lines = by_process_table(results).splitlines()

    assert lines[0].startswith("| CPU ms / run by process (median) | caller | worker parent |")
    assert lines[2] == "| interlude | 2.20 | 0.00 | 0.00 | 3.00 | 0.00 | 0.00 |"
    assert len(lines) == 3


def test_one_lane_by_process_says_what_interlude_spends_above_its_record_floor() -> None:
    # Given rounds of 500 runs whose CPU is read as seconds by role (bench.w1 --cpu)
    def spent(caller: float, worker: float, postgres: float) -> dict[str, Any]:
        roles = dict.fromkeys(ROLES, 0.0)
        cpu = {**roles, "caller": caller, "worker parent": worker, "postgres": postgres}
        return {"rate": 1.0, "runs": 500, "cpu": cpu}

    results = {
        INTERLUDE: [spent(0.9, 1.4, 1.3), spent(1.0, 1.5, 1.2), spent(1.1, 1.6, 1.4)],
        RECORD_FLOOR: [spent(0.5, 0.8, 1.3), spent(0.6, 0.9, 1.2)],
        LG_SYNC: [{"rate": 1.0, "runs": 500}],
    }

    lines = (above_the_record_floor(results) or "").splitlines()

    # Then each role's median in ms a run, and interlude's excess over the floor's
    assert lines[0].startswith("| one lane, CPU ms / run by process (median) | caller |")
    assert lines[2] == "| interlude | 2.00 | 3.00 | 0.00 | 2.60 | 0.00 | 0.00 |"
    assert lines[3] == f"| {RECORD_FLOOR} | 1.10 | 1.70 | 0.00 | 2.50 | 0.00 | 0.00 |"
    assert lines[4] == (
        "| interlude above the record floor | +0.90 | +1.30 | +0.00 | +0.10 | +0.00 | +0.00 |"
    )


def test_without_the_floors_cpu_nothing_is_said_above_it() -> None:
    results = {INTERLUDE: [{"rate": 1.0, "runs": 500, "cpu": dict.fromkeys(ROLES, 1.0)}]}
    assert above_the_record_floor(results) is None


def test_the_report_names_the_machine_by_its_speed_at_the_start() -> None:
    line = header("python -m bench.compare --runs 500", 2, 0.63, 1.4512)
    assert line == (
        "`python -m bench.compare --runs 500` (2 cores, load average 0.6 at the start, "
        "a 10 M-addition loop in 1.45 s)"
    )
