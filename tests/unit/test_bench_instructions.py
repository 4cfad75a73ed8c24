"""bench.w1_instructions' arithmetic: the count read from valgrind, and the cost of a run;
bench.pg_instructions' reading of the server processes' counts."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from bench.pg_instructions import _as_server_user, counts
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


def test_each_server_process_total_is_read_and_one_being_written_is_none(tmp_path: Path) -> None:
    # callgrind ends a finished process's file with its total ("summary:" or "totals:").
    (tmp_path / "cg.101").write_text("version: 1\ncmd: postgres\nevents: Ir\nsummary: 4500\n")
    (tmp_path / "cg.102").write_text("version: 1\nevents: Ir\nfn=main\n0 12\ntotals: 70\n")
    (tmp_path / "cg.103").write_text("version: 1\nevents: Ir\nfn=main\n")
    (tmp_path / "server.log").write_text("LOG: database system is ready\n")

    assert counts(tmp_path) == {"cg.101": 4500, "cg.102": 70, "cg.103": None}


def test_the_server_runs_as_postgres_when_this_is_root() -> None:
    command = ["/usr/lib/postgresql/15/bin/initdb", "-D", "/tmp/x"]
    if os.geteuid() == 0:
        assert _as_server_user(command) == ["runuser", "-u", "postgres", "--", *command]
    else:
        assert _as_server_user(command) == command
