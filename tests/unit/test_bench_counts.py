"""bench.compare's per-run counts: what each further run costs, start-up apart."""

from __future__ import annotations

from pytest import approx

from bench.compare import per_run_and_start_up


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
