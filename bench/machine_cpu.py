"""The whole machine's CPU, and the start signal of processes measured together.

Standard library only: the rivals' scripts import it (as ``machine_cpu``, from their own
folder) under a Python that has none of interlude's packages.

- ``busy_seconds``: CPU seconds the machine has spent, all cores and every process (the kernel
  included; not the hypervisor's steal), from the first line of ``/proc/stat``. Read before
  and after a timed part, the difference is what that part cost the machine, whoever spent
  it: the caller, workers, PostgreSQL, Redis, or anything else running meanwhile (so measure
  on a quiet machine).
- ``wait_for_go``: a measured process, once ready (imports done, graph compiled), says
  ``ready`` on its stdout and waits for a line on its stdin; the driver (``bench.lanes``)
  starts every process's clock at once and reads the machine's CPU around the timed part only.
- ``report_result``: a measured process prints its result, one JSON line, and under the driver
  waits for its word to end: the process and its connections (their server backends) still
  live while the driver reads what each process spent.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

# /proc/stat's cpu line: user nice system idle iowait irq softirq steal guest guest_nice.
# Busy is all but idle, iowait and steal; guest time is already counted in user. Steal is
# time the hypervisor ran another machine while this one's cores had work: no process here
# spent it (each process's own CPU time leaves it out too), and on a shared host it comes
# and goes with the neighbours, so counting it made a run's CPU move with them.
_BUSY_FIELDS = (0, 1, 2, 5, 6)
READY = "ready"
LANE_ENV = "BENCH_LANE"  # set (to anything) by the driver: wait for the start signal


def parse_busy_ticks(stat_text: str) -> int:
    """Busy clock ticks of all cores together, from the text of ``/proc/stat``."""
    first = stat_text.split("\n", 1)[0].split()
    if first[0] != "cpu":
        raise ValueError("/proc/stat does not start with the all-cores cpu line")
    values = [int(v) for v in first[1:]]
    return sum(values[i] for i in _BUSY_FIELDS if i < len(values))


def busy_seconds() -> float:
    with open("/proc/stat") as stat:
        return parse_busy_ticks(stat.read()) / os.sysconf("SC_CLK_TCK")


def wait_for_go() -> None:
    """Under the driver, say ready and wait for the start; alone, start at once."""
    if os.environ.get(LANE_ENV):
        print(READY, flush=True)
        sys.stdin.readline()


def report_result(result: dict[str, Any]) -> None:
    """Print ``result`` as one JSON line; under the driver, wait for the word to end."""
    print(json.dumps(result), flush=True)
    if os.environ.get(LANE_ENV):
        sys.stdin.readline()
