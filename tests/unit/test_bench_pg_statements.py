"""bench.pg_statements: what a further run costs the server, from two counts of the counters."""

from __future__ import annotations

from pytest import approx

from bench.pg_statements import Counted, per_run


def test_a_further_run_costs_what_the_longer_count_has_more_and_start_up_cancels() -> None:
    # (calls, total exec ms, buffers, WAL records, WAL bytes) by text.
    warm = Counted(
        statements={
            "claim": (200.0, 20.0, 1000.0, 2600.0, 500_000.0),
            "migration": (1.0, 50.0, 90.0, 40.0, 9_000.0),  # once per process: cancels
        },
        wal=(20_000.0, 3_000_000.0, 900.0),
    )
    more = Counted(
        statements={
            "claim": (400.0, 46.0, 2000.0, 5200.0, 1_000_000.0),
            "migration": (1.0, 50.0, 90.0, 40.0, 9_000.0),
            "FK check": (1500.0, 3.0, 6100.0, 700.0, 38_000.0),  # new in the longer one
        },
        wal=(33_400.0, 4_600_000.0, 1700.0),
    )

    found = per_run(warm, more, runs=100)

    claim, check = found["statements"]  # the slowest first; the migration left out
    assert claim == approx(
        {
            "statement": "claim",
            "calls": 2.0,
            "exec_us": 260.0,
            "buffers": 10.0,
            "wal_records": 26.0,
            "wal_bytes": 5000.0,
        }
    )
    assert check["statement"] == "FK check" and check["calls"] == 15.0
    assert (found["wal_records"], found["wal_bytes"], found["wal_flushes"]) == approx(
        (134.0, 16_000.0, 8.0)
    )
