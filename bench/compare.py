"""interlude against LangGraph and DBOS on this machine, side by side, in one go.

    .venv/bin/python -m bench.compare --rivals-python /path/to/venv/bin/python

Each system in a fresh PostgreSQL database on the same server; for every W1 figure, the
machine's CPU per run as well (``bench.machine_cpu``: all cores, every process, over the timed
part only, whoever spent it: callers, workers, PostgreSQL, Redis):

- **W1**, the approval path (``bench.w1``): start N runs, each stops on one approval; resume
  each; a final step makes one effect. interlude: one worker lane (``--pool``: one ``--pool
  solo`` process, or ``-c 1`` prefork) and a caller process; LangGraph (``durability="sync"``
  and ``"exit"``) and DBOS in one process each; and Celery alone doing W1's two tasks per run
  with no work at all (``bench.w1_floor``), the ceiling of any system that runs each step as a
  Celery task; interlude's own work, the same W1 in one process through the test seam with
  no broker (``bench.w1_in_process``); and W1's eight flushed commits with nothing else
  (``bench.w1_commit_floor``), which with Celery's hop make the floor of a run's CPU; and the
  two together as interlude must make them, the commits in the caller and the worker that make
  them in interlude (``bench.w1_durable_floor``); and the same with interlude's own nine
  statements, as it sends them, and none of its Python (``bench.w1_record_floor``).
- **machine**: W1 with the whole machine, ``--lanes`` (the cores) of everything: interlude
  with as many callers (processes) and worker lanes, each rival as as many processes, all
  started together (``bench.lanes``); and interlude's record floor so too.
- **latency**: answers at 40 a second to waiting W1 runs, from each answer to its step moving
  on the worker (``bench.resume_latency``).
- **three-step** runs, one after another (``bench.throughput``; a bare Celery chain, not
  durable, as the floor).
- **W4**, steps waiting on I/O (``bench.w4``): one ``-P threads -c 50`` worker, interlude and
  Celery alone on the same tasks with no durability (``bench.w4_floor``).

The systems take turns for ``--rounds`` rounds and the median of each is reported, so that the
noise of a shared machine falls on all of them alike: read the ratios, not the absolute numbers.
Then two counting runs per system (never timed), of N and 2N runs, give W1's transactions and
statements as the server counted and logged them: what each further run costs (the second run's
total less the first's, over N) and, apart, what a process costs once whatever it runs (its
connections' set-up: ``per_run_and_start_up``). The rivals' Python needs
``langgraph langgraph-checkpoint-postgres dbos`` (kept out of our dependencies).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import pg, resume_latency, rivals
from bench.cpu import ROLES, ms_per_run
from bench.processes import ROOT, exclusive
from bench.throughput import bench_bare, bench_interlude
from bench.w1 import POOLS, describe_costs

INTERLUDE = "interlude"
LG_SYNC = 'LangGraph + PostgresSaver, durability="sync"'
LG_EXIT = 'LangGraph + PostgresSaver, durability="exit"'
DBOS = "DBOS"
BARE = "bare Celery chain (not durable)"
FLOOR = "Celery alone: W1's two tasks per run, doing nothing (the broker's floor)"
W4_FLOOR = "Celery alone: one task of two 200 ms sleeps per run (the broker's floor)"
IN_PROCESS = "interlude in one process, no broker (the test seam; not how it runs)"
COMMITS = "W1's eight flushed commits alone, one process, nothing else (the database's floor)"
DURABLE_FLOOR = (
    "Celery's two tasks with W1's eight flushed commits, each made where interlude makes it "
    "(the floor of a durable Celery design)"
)
RECORD_FLOOR = (
    "Celery's two tasks with W1's nine statements as interlude sends them, and none of its "
    "Python (the floor of interlude's record)"
)
POOL_NAMES = {"solo": "one --pool solo worker", "prefork": "one -c 1 prefork worker"}
WORKLOADS = ("w1", "machine", "latency", "three", "w4")


def _ours(module: str, *args: str) -> dict[str, Any]:
    """One of our benchmarks in a process of its own (the caller), its JSON result."""
    done = subprocess.run(
        [sys.executable, "-m", module, *args, "--json"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=rivals.TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        # Warnings before the traceback say what went wrong first (a publish that failed, say).
        warned = [line for line in done.stderr.splitlines() if "WARNING" in line or "ERROR" in line]
        raise RuntimeError(
            f"{module} {' '.join(args)} failed:\n" + "\n".join(warned[:20]) + done.stderr[-3000:]
        )
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def w1_systems(
    python: str, runs: int, *, count: bool = False, pool: str = "prefork"
) -> dict[str, Callable[[], Any]]:
    """W1 on one lane: interlude's caller and one worker lane, each rival in one process."""
    if count:
        return {
            INTERLUDE: lambda: _ours("bench.w1", "--runs", str(runs), "--count"),
            LG_SYNC: lambda: rivals.run(
                python, "rival_langgraph_w1.py", runs, "sync", setup=True, count=True
            ),
            LG_EXIT: lambda: rivals.run(
                python, "rival_langgraph_w1.py", runs, "exit", setup=True, count=True
            ),
            DBOS: lambda: rivals.run(python, "rival_dbos_w1.py", runs, setup=True, count=True),
        }
    other = "prefork" if pool == "solo" else "solo"
    # interlude and its record floor with their CPU by process (read from /proc at the timed
    # part's ends): what interlude's Python costs above the floor, process by process.
    return {
        INTERLUDE: lambda: _ours("bench.w1", "--runs", str(runs), "--pool", pool, "--cpu"),
        f"interlude, {POOL_NAMES[other]}": lambda: _ours(
            "bench.w1", "--runs", str(runs), "--pool", other
        ),
        **_rivals_w1(python, runs, 1),
        FLOOR: lambda: _ours("bench.w1_floor", "--runs", str(runs), "--pool", pool),
        IN_PROCESS: lambda: _ours("bench.w1_in_process", "--runs", str(runs)),
        COMMITS: lambda: _ours("bench.w1_commit_floor", "--runs", str(runs)),
        DURABLE_FLOOR: lambda: _ours("bench.w1_durable_floor", "--runs", str(runs), "--pool", pool),
        RECORD_FLOOR: lambda: _ours(
            "bench.w1_record_floor", "--runs", str(runs), "--pool", pool, "--cpu"
        ),
    }


def _rivals_w1(python: str, runs: int, processes: int) -> dict[str, Callable[[], Any]]:
    script = "rival_langgraph_w1.py"
    return {
        LG_SYNC: lambda: rivals.run_lanes(python, script, runs, processes, "sync"),
        LG_EXIT: lambda: rivals.run_lanes(python, script, runs, processes, "exit"),
        DBOS: lambda: rivals.run_lanes(python, "rival_dbos_w1.py", runs, processes),
    }


def whole_machine_systems(
    python: str, runs: int, lanes: int, pool: str
) -> dict[str, Callable[[], Any]]:
    """W1 with the whole machine: ``lanes`` callers and worker lanes for interlude, ``lanes``
    processes for each rival."""
    ours = ["bench.w1", "--runs", str(runs), "--lanes", str(lanes), "--pool", pool]
    record = ["bench.w1_record_floor", "--runs", str(runs), "--lanes", str(lanes)]
    return {
        INTERLUDE: lambda: _ours(*ours),
        **_rivals_w1(python, runs, lanes),
        RECORD_FLOOR: lambda: _ours(*record),
    }


def three_step_systems(python: str, runs: int) -> dict[str, Callable[[], Any]]:
    return {
        INTERLUDE: lambda: {"rate": bench_interlude(runs, "postgresql", 1)},
        LG_SYNC: lambda: rivals.run(python, "rival_langgraph.py", runs, "sync"),
        LG_EXIT: lambda: rivals.run(python, "rival_langgraph.py", runs, "exit"),
        DBOS: lambda: rivals.run(python, "rival_dbos.py", runs),
        BARE: lambda: {"rate": bench_bare(runs, 1)},
    }


def take_turns(
    systems: dict[str, Callable[[], Any]], rounds: int, key: str
) -> dict[str, list[dict[str, Any]]]:
    """Each round runs every system once, starting one further along, so none is always first.
    Every round's whole result, by system; ``key`` is the figure said as it goes."""
    names = list(systems)
    found: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for r in range(rounds):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            result = systems[name]()
            found[name].append(result)
            cpu = result.get("cpu_ms_per_run")
            said = f"{float(result[key]):.1f}" + (f", {cpu:.2f} ms CPU per run" if cpu else "")
            print(f"  round {r + 1}: {name}: {said}", file=sys.stderr, flush=True)
    return found


def figures(results: dict[str, list[dict[str, Any]]], key: str) -> dict[str, list[float]]:
    """One figure of every round, by system (systems without it left out)."""
    return {
        name: [float(r[key]) for r in rounds]
        for name, rounds in results.items()
        if all(key in r for r in rounds)
    }


COUNTED = ("transactions", "pings", "statements")


def per_run_and_start_up(
    runs: int, once: dict[str, Any], twice: dict[str, Any]
) -> dict[str, dict[str, float]]:
    """From counting runs of ``runs`` and ``2 * runs`` runs (their figures per run): what
    each further run costs, and what is left over, counted once (start-up, connections).

    The first figure is the one to compare: a run of N runs also pays each process's start-up
    (a connection's set-up, the driver's type lookups), which N dilutes but never removes.
    """
    # once = start_up / runs + each, twice = start_up / (2 * runs) + each
    each = {k: 2 * twice[k] - once[k] for k in COUNTED}
    return {"per_run": each, "start_up": {k: runs * (once[k] - each[k]) for k in COUNTED}}


def hop_plus_work(rates: dict[str, list[float]]) -> str | None:
    """What W1's two extra rows predict for interlude on the worker, beside what it did.

    A run on the worker costs about the time Celery alone takes for its two tasks plus the
    time of interlude's own work in one process, when the two do not overlap (one prefork
    child, the steps one after another): 1/floor + 1/in-process seconds per run.
    """
    if not {INTERLUDE, FLOOR, IN_PROCESS} <= rates.keys():
        return None
    floor, own, measured = (
        statistics.median(rates[name]) for name in (FLOOR, IN_PROCESS, INTERLUDE)
    )
    per_run_ms = 1000 / floor + 1000 / own
    return (
        f"The broker's floor and interlude's own work added: {1000 / floor:.2f} ms + "
        f"{1000 / own:.2f} ms = {per_run_ms:.2f} ms per run, {1000 / per_run_ms:.1f} runs/s, "
        f"against {measured:.1f} measured on the worker."
    )


def cpu_floor(cpu: dict[str, list[float]]) -> str | None:
    """The CPU no design that runs each step as a Celery task and commits every transition can
    avoid (Celery's hop and eight flushed commits, medians), against LangGraph ``sync``'s run
    and interlude's: what is left above it is interlude's own work. Where measured, the same
    floor with the commits made where interlude makes them, then with interlude's own
    statements (its record) in their place: what is left above that is its Python."""
    if not {INTERLUDE, FLOOR, COMMITS, LG_SYNC} <= cpu.keys():
        return None
    hop, commits, ours, lg_sync = (
        statistics.median(cpu[name]) for name in (FLOOR, COMMITS, INTERLUDE, LG_SYNC)
    )
    floor = hop + commits
    said = (
        f"The floor of a run's CPU: Celery's hop {hop:.2f} ms + eight flushed commits "
        f"{commits:.2f} ms = {floor:.2f} ms, {floor / lg_sync:.2f} of LangGraph `sync`'s "
        f"{lg_sync:.2f} ms; interlude's {ours:.2f} ms is {ours - floor:.2f} ms above it."
    )
    if DURABLE_FLOOR in cpu:
        # The sum above commits from one process; a Celery design commits from two.
        durable = statistics.median(cpu[DURABLE_FLOOR])
        said += (
            f" Made where interlude makes them (the caller two, the worker six), the hop and "
            f"the commits cost {durable:.2f} ms together, {durable / lg_sync:.2f} of LangGraph "
            f"`sync`'s; interlude's own schema and code cost {ours - durable:.2f} ms above that."
        )
    if RECORD_FLOOR in cpu:
        # What interlude asks of the server, sent as it sends it, with none of its Python.
        record = statistics.median(cpu[RECORD_FLOOR])
        said += (
            f" With interlude's own nine statements in place of the bare commits, and none of "
            f"its Python: {record:.2f} ms, {record / lg_sync:.2f} of LangGraph `sync`'s; "
            f"interlude's Python costs {ours - record:.2f} ms above that."
        )
    return said


def rate_table(
    title: str,
    unit: str,
    rates: dict[str, list[float]],
    extra: Any = None,
    cpu: dict[str, list[float]] | None = None,
) -> str:
    """A Markdown table: median, the rounds, and interlude's median over each system's; with
    ``cpu``, the machine's CPU per run (median) and interlude's over each system's."""
    medians = {name: statistics.median(values) for name, values in rates.items()}
    base = medians[INTERLUDE]
    cpu_medians = {name: statistics.median(values) for name, values in (cpu or {}).items()}
    head = f"| {title} | {unit} (median) | rounds | interlude ÷ this |"
    if cpu:
        head += " CPU ms / run, whole machine (median) | interlude's CPU ÷ this |"
    if extra:
        head += (
            " transactions / run | of which pre-pings | statements / run"
            " | once per bench (transactions, statements) |"
        )
    lines = [head, _rule(head)]
    for name, rate in medians.items():
        spread = ", ".join(f"{v:.1f}" for v in rates[name])
        row = f"| {name} | {rate:.1f} | {spread} | {base / rate:.2f} |"
        if cpu:
            spent = cpu_medians.get(name)
            row += (
                f" {spent:.2f} | {cpu_medians[INTERLUDE] / spent:.2f} |"
                if spent and INTERLUDE in cpu_medians
                else " n/a | n/a |"
            )
        if extra:
            costs = extra.get(name)
            if costs:
                each, once = costs["per_run"], costs["start_up"]
                row += (
                    f" {each['transactions']:.2f} | {each['pings']:.2f} |"
                    f" {each['statements']:.2f} |"
                    f" {once['transactions']:.0f}, {once['statements']:.0f} |"
                )
            else:
                row += " n/a | n/a | n/a | n/a |"
        lines.append(row)
    return "\n".join(lines)


def by_process_table(
    results: dict[str, list[dict[str, Any]]], title: str = "CPU ms / run by process (median)"
) -> str:
    """A Markdown table of who spent the machine's CPU per run (ms, the median of the rounds):
    the measured processes (interlude's callers; a rival's processes, which do all its Python),
    interlude's workers, PostgreSQL, Redis, the rest."""
    head = f"| {title} | " + " | ".join(ROLES) + " |"
    lines = [head, _rule(head)]
    for name, medians in _role_medians(results).items():
        lines.append(f"| {name} | " + " | ".join(f"{m:.2f}" for m in medians) + " |")
    return "\n".join(lines)


def _role_medians(results: dict[str, list[dict[str, Any]]]) -> dict[str, list[float]]:
    """Each system's CPU ms per run by role (``ROLES``' order), the median of its rounds that
    measured it; systems whose rounds did not are left out."""
    found: dict[str, list[float]] = {}
    for name, rounds in results.items():
        spent = [r["cpu_ms_per_run_by_role"] for r in rounds if "cpu_ms_per_run_by_role" in r]
        if spent:
            found[name] = [statistics.median(s[role] for s in spent) for role in ROLES]
    return found


def above_the_record_floor(results: dict[str, list[dict[str, Any]]]) -> str | None:
    """``by_process_table`` of interlude and its record floor on one lane, and their
    difference: where interlude's Python costs what the floor, sending the same statements
    from the same processes, does not. (One lane's rounds read CPU seconds by role, ``cpu``.)"""
    per_run = {
        name: [
            {"cpu_ms_per_run_by_role": ms_per_run(r["cpu"], r["runs"])}
            for r in results.get(name, [])
            if "cpu" in r
        ]
        for name in (INTERLUDE, RECORD_FLOOR)
    }
    medians = _role_medians(per_run)
    if len(medians) < 2:
        return None
    above = [ours - floor for ours, floor in zip(*medians.values(), strict=True)]
    said = " | ".join(f"{v:+.2f}" for v in above)
    table = by_process_table(per_run, "one lane, CPU ms / run by process (median)")
    return f"{table}\n| interlude above the record floor | {said} |"


def _rule(head: str) -> str:
    return "|" + " --- |" * (head.count("|") - 1)


# The machine's speed is named by the seconds a loop of this many additions takes.
SPEED_LOOP_ADDITIONS = 10_000_000


def machine_speed() -> float:
    """Seconds one core takes to add up ``SPEED_LOOP_ADDITIONS`` integers in a Python loop: how
    fast the machine is at the start (the project's machine is replaced often, and the same
    machine's speed moves by two times within a morning; the report names each by it)."""
    start = time.perf_counter()
    total = 0
    for i in range(SPEED_LOOP_ADDITIONS):
        total += i
    return time.perf_counter() - start


def header(command: str, cores: int, load: float, loop_seconds: float) -> str:
    """The report's first line: the command, and the machine it ran on."""
    return (
        f"`{command}` ({cores} cores, load average {load:.1f} at the start, "
        f"a {SPEED_LOOP_ADDITIONS // 1_000_000} M-addition loop in {loop_seconds:.2f} s)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rivals-python", required=True)
    parser.add_argument("--runs", type=int, default=200, help="runs of W1 and three-step")
    parser.add_argument("--w4-runs", type=int, default=400)
    parser.add_argument("--latency-runs", type=int, default=800, help="answers at 40/s")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--workloads", default=",".join(WORKLOADS), help=",".join(WORKLOADS))
    parser.add_argument("--no-count", action="store_true", help="skip W1's counting runs")
    parser.add_argument(
        "--pool", choices=POOLS, default="solo", help="interlude's worker pool (bench.w1)"
    )
    parser.add_argument(
        "--lanes",
        type=int,
        default=os.cpu_count() or 1,
        help="W1 on the whole machine: processes (rivals), callers and worker lanes (interlude)",
    )
    args = parser.parse_args()
    python, runs = args.rivals_python, args.runs
    workloads = [w for w in args.workloads.split(",") if w]
    for w in workloads:
        if w not in WORKLOADS:
            parser.error(f"unknown workload {w!r}; one of {', '.join(WORKLOADS)}")
    if "w1" in workloads and not args.no_count:
        pg.check_log()
    command = "python -m bench.compare " + shlex.join(sys.argv[1:])
    out = [header(command, os.cpu_count() or 1, os.getloadavg()[0], machine_speed()), ""]

    if "w1" in workloads:
        print("W1 …", file=sys.stderr, flush=True)
        results = take_turns(w1_systems(python, runs, pool=args.pool), args.rounds, "rate")
        rates, cpu = figures(results, "rate"), figures(results, "cpu_ms_per_run")
        costs: dict[str, Any] = {}
        detail: dict[str, Any] = {}
        if not args.no_count:
            print("W1 counting runs …", file=sys.stderr, flush=True)
            doubled = w1_systems(python, 2 * runs, count=True)
            for name, measure in w1_systems(python, runs, count=True).items():
                detail[name] = measure()["counts"]
                costs[name] = per_run_and_start_up(runs, detail[name], doubled[name]()["counts"])
        out += [
            rate_table(
                f"W1, {runs} runs: approval, resume, effect; one lane ({args.pool} worker)",
                "runs/s",
                rates,
                costs,
                cpu,
            ),
            "",
        ]
        for line in (hop_plus_work(rates), cpu_floor(cpu), above_the_record_floor(results)):
            if line:
                out += [line, ""]
        if costs:
            out += [
                f"Per W1 run, from separate counting runs of {runs} and {2 * runs} runs: "
                "transactions as PostgreSQL counts them (`pg_stat_database`, every process, the "
                "bench's polling left out; a pool pre-ping is one), statements from its "
                "statement log without BEGIN/COMMIT and pre-pings. Per run is what each further "
                f"run costs (the second count less the first, over {runs}); the last column is "
                "what is left, paid once whatever the number of runs (each process's "
                "connections and their set-up).",
                "",
            ]
        if INTERLUDE in detail:
            described = describe_costs(detail[INTERLUDE])
            out += [
                f"interlude's W1 counting run of {runs} runs, divided by {runs}:",
                "```",
                described,
                "```",
                "",
            ]
    if "machine" in workloads:
        lanes = args.lanes
        print(f"W1 on the whole machine, {lanes} lanes …", file=sys.stderr, flush=True)
        systems = whole_machine_systems(python, runs * lanes, lanes, args.pool)
        results = take_turns(systems, args.rounds, "rate")
        title = (
            f"W1, {runs * lanes} runs on the whole machine: {lanes} processes each"
            f" (interlude: {lanes} callers, {lanes} {args.pool} worker lanes)"
        )
        rates, cpu = figures(results, "rate"), figures(results, "cpu_ms_per_run")
        out += [rate_table(title, "runs/s", rates, cpu=cpu), "", by_process_table(results), ""]
    if "latency" in workloads:
        print("resume latency …", file=sys.stderr, flush=True)
        found = _ours("bench.resume_latency", "--runs", str(args.latency_runs), "--pool", args.pool)
        out += [resume_latency.report(found), ""]
    if "three" in workloads:
        print("three-step …", file=sys.stderr, flush=True)
        three = figures(take_turns(three_step_systems(python, runs), args.rounds, "rate"), "rate")
        out += [rate_table(f"{runs} three-step runs, one after another", "runs/s", three), ""]
    if "w4" in workloads:
        print("W4 …", file=sys.stderr, flush=True)
        w4_runs = str(args.w4_runs)
        seen: list[dict[str, Any]] = []  # each round's whole result, for the ideal rate

        def w4(module: str) -> dict[str, Any]:
            seen.append(_ours(module, "--runs", w4_runs))
            return seen[-1]

        results = take_turns(
            {INTERLUDE: lambda: w4("bench.w4"), W4_FLOOR: lambda: w4("bench.w4_floor")},
            args.rounds,
            "steps_per_s",
        )
        out += [
            f"| W4, {args.w4_runs} runs of two 200 ms steps, `-P threads -c 50` "
            "| steps/s (median) | rounds | efficiency |",
            "| --- | --- | --- | --- |",
        ]
        for system, steps_per_s in figures(results, "steps_per_s").items():
            spread = ", ".join(f"{r:.1f}" for r in steps_per_s)
            steps = statistics.median(steps_per_s)
            efficiency = steps / seen[0]["ideal"]
            out.append(f"| {system} | {steps:.1f} | {spread} | {efficiency:.2f} |")
        out.append("")
    print("\n".join(out))


if __name__ == "__main__":
    with exclusive("bench.compare"):
        main()
