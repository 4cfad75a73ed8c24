"""bench.w1_instructions' arithmetic: the count read from valgrind, and the cost of a run."""

from __future__ import annotations

import pytest

from bench.w1_instructions import collected, per_run

CLOSING = """==4242== Events    : Ir
==4242== Collected : 7618733018
==4242==
==4242== I   refs:      7,618,733,018
"""


def test_the_count_is_read_from_callgrinds_closing_lines() -> None:
    assert collected("some output of the child\n" + CLOSING) == 7618733018


def test_output_without_a_count_is_an_error_not_a_zero() -> None:
    with pytest.raises(RuntimeError, match="no instruction count"):
        collected("==4242== Memcheck, a memory error detector\n")


def test_the_warm_runs_cancel_and_what_is_left_is_per_further_run() -> None:
    # 5.0 G of start-up and warm runs in both, 11.0 M per run: 200 more runs.
    warm = 5_000_000_000 + 50 * 11_000_000
    assert per_run(warm, warm + 200 * 11_000_000, 200) == pytest.approx(11_000_000)


def test_counts_that_cannot_be_differenced_are_refused() -> None:
    with pytest.raises(ValueError):
        per_run(10, 5, 200)
    with pytest.raises(ValueError):
        per_run(5, 10, 0)
