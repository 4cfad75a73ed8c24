"""bench.cpu: CPU time per process read from /proc, grouped by the bench's roles."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from pytest import approx

from bench.cpu import (
    ROLES,
    TICKS_PER_SECOND,
    ProcessTime,
    by_role,
    describe,
    parse_stat,
    snapshot,
    spent,
)
from bench.machine_cpu import busy_seconds, parse_busy_ticks

# A real line's shape: pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt
# majflt cmajflt utime stime ...
LINE = "4242 ({name}) S {ppid} 4242 4242 0 -1 4194560 900 0 0 0 {utime} {stime} 0 0 20 0 1 0"


def _line(name: str, ppid: int, utime: int, stime: int) -> str:
    return LINE.format(name=name, ppid=ppid, utime=utime, stime=stime)


def test_a_stat_line_gives_name_parent_and_user_plus_system_time() -> None:
    assert parse_stat(_line("postgres", 1, 70, 5)) == ProcessTime("postgres", 1, 75)


def test_a_name_with_spaces_and_parentheses_does_not_shift_the_fields() -> None:
    process = parse_stat(_line("celery (worker) 1", 7, 3, 4))
    assert (process.name, process.parent, process.ticks) == ("celery (worker) 1", 7, 7)


def test_cpu_is_what_each_role_spent_between_the_snapshots() -> None:
    tick = 1 / TICKS_PER_SECOND
    before = {
        10: ProcessTime("python", 1, 100),  # the caller
        20: ProcessTime("python", 1, 50),  # the worker's parent
        21: ProcessTime("python", 20, 10),  # its child
        30: ProcessTime("postgres", 1, 1000),
        40: ProcessTime("redis-server", 1, 5),
        50: ProcessTime("kworker/0:1", 2, 9),
    }
    after = {
        10: ProcessTime("python", 1, 130),
        20: ProcessTime("python", 1, 70),
        21: ProcessTime("python", 20, 50),
        22: ProcessTime("python", 20, 4),  # a child started inside: all its time counts
        30: ProcessTime("postgres", 1, 1300),
        31: ProcessTime("postgres", 30, 60),  # a backend the bench opened
        40: ProcessTime("redis-server", 1, 7),
        50: ProcessTime("kworker/0:1", 2, 9),  # idle: nothing
    }

    spent = by_role(before, after, callers={10}, workers=[20])

    assert spent == approx(
        {
            "caller": 30 * tick,
            "worker parent": 20 * tick,
            "worker children": 44 * tick,
            "postgres": 360 * tick,
            "redis": 2 * tick,
            "other": 0.0,
        }
    )


def test_per_run_figures_are_in_milliseconds_with_the_cores_kept_busy() -> None:
    spent = {"caller": 0.3, "worker parent": 0.2, "worker children": 0.4, "postgres": 0.1}

    text = describe(spent, runs=100, seconds=0.5)

    assert text.startswith("CPU per run: 10.00 ms (2.00 cores busy on average): ")
    assert "caller 3.00, worker parent 2.00, worker children 4.00, postgres 1.00" in text


def test_a_snapshot_reads_every_process_and_skips_what_it_cannot(tmp_path: Path) -> None:
    (tmp_path / "12").mkdir()
    (tmp_path / "12" / "stat").write_text(_line("redis-server", 1, 8, 2))
    (tmp_path / "13").mkdir()
    (tmp_path / "13" / "stat").write_text("")  # ended while read
    (tmp_path / "self").mkdir()

    assert snapshot(tmp_path) == {12: ProcessTime("redis-server", 1, 10)}


def test_this_process_is_found_in_the_real_proc() -> None:
    mine = snapshot()[os.getpid()]
    assert mine.parent == os.getppid()
    assert mine.ticks >= 0


def test_a_block_measured_gets_every_role_and_one_not_measured_nothing() -> None:
    with spent(workers=[-1]) as measured:
        sum(range(200_000))
    with spent(workers=[-1], enabled=False) as skipped:
        pass

    assert set(measured) == set(ROLES)
    assert measured["caller"] >= 0
    assert skipped == {}


def test_the_machines_busy_ticks_leave_out_idle_iowait_and_steal() -> None:
    # Given /proc/stat's all-cores line (user nice system idle iowait irq softirq steal guest
    # guest_nice), When its busy ticks are read, Then idle, iowait and the hypervisor's steal
    # are left out, guest time is not counted twice (it is inside user already).
    text = "cpu  100 2 30 5000 70 4 5 600 9 0\ncpu0 50 1 15 2500 35 2 2 300 4 0\n"
    assert parse_busy_ticks(text) == 100 + 2 + 30 + 4 + 5


def test_a_stat_without_the_all_cores_line_is_refused() -> None:
    with pytest.raises(ValueError, match="all-cores cpu line"):
        parse_busy_ticks("intr 1 2 3\n")


def test_the_machine_has_spent_some_cpu_since_it_started() -> None:
    assert busy_seconds() > 0


def test_latency_percentiles_take_the_nearest_rank() -> None:
    from bench.resume_latency import percentiles

    found = percentiles([float(v) for v in range(1, 101)])  # 1 .. 100 ms
    assert found == {"median": 50.5, "p95": 95.0, "p99": 99.0, "max": 100.0}
    assert percentiles([7.0]) == {"median": 7.0, "p95": 7.0, "p99": 7.0, "max": 7.0}


def test_the_bench_polls_often_only_near_the_end() -> None:
    from bench.w1 import MAX_POLL_SECONDS, POLL_SECONDS, next_poll

    assert next_poll(500, 0, 0.3) == POLL_SECONDS  # no pace yet
    assert next_poll(40, 100, 1.0) == approx(0.1)  # 40 left at 10 ms each: a quarter
    assert next_poll(10_000, 10, 1.0) == MAX_POLL_SECONDS
    assert next_poll(1, 499, 4.0) == POLL_SECONDS
