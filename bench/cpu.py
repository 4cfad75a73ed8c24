"""CPU time by process over a bench's measured stretch: where a run's CPU goes.

Read from ``/proc/<pid>/stat`` (user + system time) of every process before and after, and
grouped by role: this process (the caller), the worker's parent, its pool children,
PostgreSQL (every backend and the server's own processes), Redis, and the rest of the machine.
A process that starts and ends inside the stretch is not seen; the bench's own live through it.

On a machine of two cores, CPU per run is what bounds a rate: ``2 / rate`` seconds of CPU per
run at most, whoever spends it. Linux only.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

TICKS_PER_SECOND = os.sysconf("SC_CLK_TCK")
ROLES = ("caller", "worker parent", "worker children", "postgres", "redis", "other")


@dataclass(frozen=True)
class ProcessTime:
    name: str  # the kernel's name for it (``comm``)
    parent: int
    ticks: int  # user + system, in clock ticks


def parse_stat(text: str) -> ProcessTime:
    """One ``/proc/<pid>/stat`` line. The name is in parentheses and may hold spaces."""
    name = text[text.index("(") + 1 : text.rindex(")")]
    fields = text[text.rindex(")") + 2 :].split()
    # After the name: state, ppid, ... utime is the 14th field of the line, stime the 15th.
    return ProcessTime(name=name, parent=int(fields[1]), ticks=int(fields[11]) + int(fields[12]))


def snapshot(proc: Path = Path("/proc")) -> dict[int, ProcessTime]:
    found = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:
            found[int(stat.parent.name)] = parse_stat(stat.read_text())
        except (OSError, ValueError):
            continue  # ended while read
    return found


def role_of(
    pid: int, process: ProcessTime, *, callers: Collection[int], workers: Collection[int]
) -> str:
    if pid in callers:
        return "caller"
    if pid in workers:
        return "worker parent"
    if process.parent in workers:
        return "worker children"
    if process.name.startswith("postgres"):
        return "postgres"
    if process.name.startswith("redis-server"):
        return "redis"
    return "other"


def by_role(
    before: dict[int, ProcessTime],
    after: dict[int, ProcessTime],
    *,
    callers: Collection[int],
    workers: Collection[int],
) -> dict[str, float]:
    """CPU seconds each role spent between the two snapshots (every role, zero if none):
    ``callers`` are the measured processes of the bench, ``workers`` the workers' main
    processes."""
    spent = dict.fromkeys(ROLES, 0.0)
    for pid, process in after.items():
        start = before.get(pid)
        ticks = process.ticks - (start.ticks if start is not None else 0)
        if ticks > 0:
            role = role_of(pid, process, callers=callers, workers=workers)
            spent[role] += ticks / TICKS_PER_SECOND
    return spent


@contextmanager
def spent(workers: Collection[int], *, enabled: bool = True) -> Iterator[dict[str, float]]:
    """CPU seconds by role inside the block, this process as the caller and ``workers`` as
    the workers' main processes: filled when the block ends, left empty if not ``enabled``."""
    found: dict[str, float] = {}
    if not enabled:
        yield found
        return
    before = snapshot()
    yield found
    found.update(by_role(before, snapshot(), callers={os.getpid()}, workers=workers))


def ms_per_run(spent: dict[str, float], runs: int) -> dict[str, float]:
    """CPU seconds by role over ``runs`` runs, as ms a run by role."""
    return {role: 1000 * cpu / runs for role, cpu in spent.items()}


def describe(spent: dict[str, float], runs: int, seconds: float) -> str:
    """Per run, in ms, by role; the total and how many cores it kept busy."""
    total = sum(spent.values())
    parts = ", ".join(f"{role} {ms:.2f}" for role, ms in ms_per_run(spent, runs).items())
    return (
        f"CPU per run: {1000 * total / runs:.2f} ms ({total / seconds:.2f} cores busy on "
        f"average): {parts}"
    )
