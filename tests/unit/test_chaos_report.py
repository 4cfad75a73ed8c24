"""The chaos run's verdict: a run without a freeze inside an effect, or with a duplicate at the
fencing target, is a violation; late calls at the plain target are a figure."""

from __future__ import annotations

from bench.chaos.faults import FREEZE_IN_EFFECT, KINDS
from bench.chaos.report import Findings


def test_a_run_that_froze_no_process_inside_an_effect_is_a_violation() -> None:
    found = Findings()
    found.faults.update(["kill_worker", "postgres_restart"])
    assert "no process was frozen inside an effect's call" in found.violations()
    found.faults[FREEZE_IN_EFFECT] += 1
    assert found.violations() == []


def test_late_calls_are_a_figure_but_a_duplicate_at_the_fencing_target_is_a_violation() -> None:
    found = Findings()
    found.faults[FREEZE_IN_EFFECT] += 1
    found.zombie_duplicates.append("r1 charge: fencing tokens [5, 4]")
    found.fenced_refused = 1
    assert found.violations() == []
    found.fenced_duplicates.append("r1 charge: fencing tokens [4, 5]")
    assert found.violations() == ["duplicates at the fencing target: 1"]


def test_freezing_inside_an_effect_is_one_of_the_faults() -> None:
    assert FREEZE_IN_EFFECT in KINDS
