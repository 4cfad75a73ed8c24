"""Alternating triples: LangGraph ``sync``, interlude's record floor and interlude, back to back.

    .venv/bin/python -m bench.triples --rivals-python /path/to/venv/bin/python
        [--triples 3] [--runs 1000] [--lanes 2]

``bench.compare`` reports each system's median over its rounds, minutes apart; on a machine
whose speed moves within minutes, a ratio of two medians can pair one system's fast minute with
the other's slow one. A triple runs the three W1s one right after another, so each of its ratios
is of figures measured within a minute or so (each triple starts one system further along);
several triples show how far they move.

Each triple: LangGraph with ``PostgresSaver`` (``durability="sync"``), the record floor
(``bench.w1_record_floor``: Celery's two tasks with interlude's nine statements as it sends
them, none of its Python) and interlude (``bench.w1``), each on one ``--pool solo`` worker lane
and its caller (LangGraph in one process), or with ``--lanes N`` on the whole machine (N of
each). Printed per triple: runs/s and the machine's CPU per run of each, the floor's and
interlude's over LangGraph's, and what interlude spends above the floor by process (callers,
workers, PostgreSQL): its own Python, in the processes it runs in.
"""

from __future__ import annotations

import argparse
import statistics
from collections.abc import Callable, Sequence
from typing import Any

from bench.compare import (
    INTERLUDE,
    LG_SYNC,
    RECORD_FLOOR,
    machine_speed,
    w1_systems,
    whole_machine_systems,
)
from bench.cpu import ms_per_run
from bench.processes import exclusive

ORDER = (LG_SYNC, RECORD_FLOOR, INTERLUDE)
# Where interlude spends above the floor, by the roles of ``bench.cpu``: the processes its
# Python runs in, and the server it asks.
ABOVE = (
    ("caller", ("caller",)),
    ("worker", ("worker parent", "worker children")),
    ("postgres", ("postgres",)),
)


def systems(python: str, runs: int, lanes: int) -> dict[str, Callable[[], dict[str, Any]]]:
    """The three W1s as ``bench.compare`` runs them, on one lane (``lanes`` 1, each with its
    CPU by process) or on the whole machine."""
    if lanes > 1:
        every = whole_machine_systems(python, runs, lanes, "solo")
    else:
        every = w1_systems(python, runs, pool="solo")
    return {name: every[name] for name in ORDER}


def by_role(result: dict[str, Any]) -> dict[str, float]:
    """CPU ms per run by process role: read by the lanes (``bench.lanes``) or, on one lane, from
    the CPU seconds ``bench.w1 --cpu`` read by role."""
    if "cpu_ms_per_run_by_role" in result:
        return dict(result["cpu_ms_per_run_by_role"])
    return ms_per_run(result["cpu"], result["runs"])


def above_floor(ours: dict[str, Any], floor: dict[str, Any]) -> dict[str, float]:
    """What interlude spent above the floor, ms a run: in its callers, its workers, PostgreSQL."""
    mine, its = by_role(ours), by_role(floor)
    return {name: sum(mine[r] - its[r] for r in roles) for name, roles in ABOVE}


def row(number: int, triple: dict[str, dict[str, Any]]) -> str:
    """One triple as a Markdown row (``HEAD``'s columns)."""
    lg, floor, ours = (triple[name] for name in ORDER)
    base_rate, base_cpu = lg["rate"], lg["cpu_ms_per_run"]
    above = above_floor(ours, floor)
    return (
        f"| {number} | {base_rate:.1f} runs/s, {base_cpu:.2f} ms"
        f" | {floor['rate']:.1f} runs/s, {floor['cpu_ms_per_run']:.2f} ms"
        f" ({floor['cpu_ms_per_run'] / base_cpu:.2f}; {floor['rate'] / base_rate:.2f})"
        f" | {ours['rate']:.1f} runs/s, {ours['cpu_ms_per_run']:.2f} ms"
        f" ({ours['cpu_ms_per_run'] / base_cpu:.2f}; {ours['rate'] / base_rate:.2f})"
        f" | {above['caller']:+.2f}; {above['worker']:+.2f}; {above['postgres']:+.2f} ms |"
    )


HEAD = (
    "| triple | LangGraph `sync` | the record floor (CPU ÷ LangGraph's; rate ÷ LangGraph's) "
    "| interlude (CPU ÷ LangGraph's; rate ÷ LangGraph's) "
    "| interlude above the floor: callers; workers; PostgreSQL |\n"
    "| --- | --- | --- | --- | --- |"
)


def summary(triples: Sequence[dict[str, dict[str, Any]]]) -> str:
    """The ratios' ranges and medians over the triples."""

    def said(values: list[float]) -> str:
        low, high, middle = min(values), max(values), statistics.median(values)
        return f"{low:.2f} to {high:.2f} (median {middle:.2f})"

    def ratio(name: str, key: str) -> list[float]:
        return [t[name][key] / t[LG_SYNC][key] for t in triples]

    return (
        f"Over {len(triples)} triples, CPU per run ÷ LangGraph `sync`'s: the record floor "
        f"{said(ratio(RECORD_FLOOR, 'cpu_ms_per_run'))}, interlude "
        f"{said(ratio(INTERLUDE, 'cpu_ms_per_run'))}; rate ÷ LangGraph's: the record floor "
        f"{said(ratio(RECORD_FLOOR, 'rate'))}, interlude {said(ratio(INTERLUDE, 'rate'))}."
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rivals-python", required=True)
    parser.add_argument("--triples", type=int, default=3)
    parser.add_argument("--runs", type=int, default=1000, help="W1 runs of each system")
    parser.add_argument("--lanes", type=int, default=1, help="2 or more: the whole machine")
    args = parser.parse_args()
    if args.triples < 1 or args.runs < 1 or args.lanes < 1:
        parser.error("--triples, --runs and --lanes must be 1 or more")
    where = "one lane" if args.lanes == 1 else f"the whole machine, {args.lanes} of each"
    print(
        f"{args.triples} triples of {args.runs} W1 runs, {where} "
        f"(a 10 M-addition loop in {machine_speed():.2f} s at the start)\n\n{HEAD}",
        flush=True,
    )
    run = systems(args.rivals_python, args.runs, args.lanes)
    found = []
    for number in range(1, args.triples + 1):
        # Each triple starts one further along, so that none is always first after a pause.
        turn = (number - 1) % len(ORDER)
        triple = {name: run[name]() for name in ORDER[turn:] + ORDER[:turn]}
        found.append(triple)
        print(row(number, triple), flush=True)
    print(f"\n{summary(found)}")


if __name__ == "__main__":
    with exclusive("bench.triples"):
        main()
