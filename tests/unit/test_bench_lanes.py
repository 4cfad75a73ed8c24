"""bench.lanes starts measured processes together and reads their results and the machine's CPU."""

from __future__ import annotations

import sys

import pytest

from bench import lanes
from bench.cpu import ROLES

# A lane as the rivals' scripts are: ready, then the start signal, then its result.
LANE = (
    "import json, sys; sys.path.insert(0, 'bench'); from machine_cpu import wait_for_go; "
    "wait_for_go(); print('noise'); print(json.dumps({'runs': int(sys.argv[1])}))"
)


def test_every_lane_starts_together_and_their_runs_add_up() -> None:
    result = lanes.run([[sys.executable, "-c", LANE, "3"], [sys.executable, "-c", LANE, "5"]])
    assert result["runs"] == 8
    assert [lane["runs"] for lane in result["lanes"]] == [3, 5]
    assert result["rate"] > 0 and result["cpu_ms_per_run"] >= 0


def test_a_lane_that_fails_before_it_is_ready_says_why() -> None:
    failing = [sys.executable, "-c", "import sys; sys.exit('no database here')"]
    with pytest.raises(RuntimeError, match="no database here"):
        lanes.run([failing])


def test_a_lane_without_a_result_fails_the_measure() -> None:
    silent = LANE.replace("print(json.dumps({'runs': int(sys.argv[1])}))", "pass")
    with pytest.raises(RuntimeError, match="without a result"):
        lanes.run([[sys.executable, "-c", silent, "1"]])


def test_each_role_is_read_while_the_lanes_still_live_then_they_are_told_to_end() -> None:
    # A lane that spends its CPU and then reports as the rivals' scripts do: it waits for the
    # word to end, so the driver reads its time (and its backends') before it goes.
    busy = (
        "import sys; sys.path.insert(0, 'bench'); "
        "from machine_cpu import report_result, wait_for_go; "
        "wait_for_go(); sum(range(20_000_000)); report_result({'runs': 2})"
    )
    result = lanes.run([[sys.executable, "-c", busy]])
    by_role = result["cpu_ms_per_run_by_role"]
    assert set(by_role) == set(ROLES)
    assert by_role["caller"] > 0 and by_role["worker parent"] == 0
