"""Instructions per W1 run of interlude's own Python: a measure the machine's noise cannot move.

    .venv/bin/python -m bench.w1_instructions [--runs 200] [--against REF] [--json]

CPU time on this shared machine moves by 10-20 % between two runs of the same code, so a change
worth 2 % cannot be seen in ``bench.w1`` without many alternating rounds. This counts machine
instructions instead: the W1 of ``bench.w1_in_process`` (enqueue, the first step, the resume
through ``submit_resume`` as a real actor, the final step with its effect; one process, steps
run through the test seam, against PostgreSQL) under valgrind's callgrind, which counts every
instruction the process executes. Two runs, of ``WARM`` and of ``WARM + runs`` runs, are
differenced, so imports, the migration and the first statements' preparation cancel out:
what is left is what each further run costs. Two measurements of the same code agree to about
0.001 %.

It counts the Python side only (interlude's code, SQLAlchemy, psycopg, json; not PostgreSQL's
server, not Celery, not the kernel), and instructions are not time (a cache miss costs more than
an addition). It is for comparing two versions of the hot path: ``--against REF`` measures a
checkout of the git revision REF (a temporary worktree, this virtualenv) and the working tree,
one after the other, and prints the ratio. ``bench.w1 --cpu`` and ``bench.compare`` remain the
measures of what a run costs the machine.

Needs valgrind (``apt-get install valgrind``); a run of 200 takes about a minute per side.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# Runs done before the counted part, in both processes: their cost cancels in the difference.
WARM = 50
_COLLECTED = re.compile(r"^==\d+== Collected : (\d+)$", re.MULTILINE)

# The child: the same W1 as bench.w1_in_process, in the checkout at sys.argv[1] (whose code it
# imports first), ``sys.argv[2]`` runs after 20 runs one by one; nothing printed.
_CHILD = """
import os, sys
sys.path.insert(0, sys.argv[1])
from bench import pg
from bench.w1 import contract, prepare
import models
if not models.__file__.startswith(sys.argv[1]):
    raise SystemExit(f"imported {models.__file__}, not the checkout's")
runs = int(sys.argv[2])
with pg.scratch_database("interlude_w1_instructions") as name:
    credential = prepare(pg.sqlalchemy_url(name))
    from models.db import dispose_engines
    from worker import enqueue_run, list_interrupts, submit_resume
    from worker.flows.flow import load_flow_modules
    from worker.testing import recording
    load_flow_modules()
    with recording() as tasks:
        for i in range(20):
            enqueue_run("bench_w1", {"n": i})
            tasks.drain()
            for interrupt in list_interrupts(status="pending", kind="approval", limit=1):
                submit_resume(contract(interrupt), credential)
            tasks.drain()
        for i in range(runs):
            enqueue_run("bench_w1", {"n": 100 + i})
        tasks.drain()
        for interrupt in list_interrupts(status="pending", kind="approval", limit=runs):
            if not submit_resume(contract(interrupt), credential).accepted:
                raise SystemExit("a resume was refused")
        tasks.drain()
    dispose_engines()
"""


def collected(valgrind_output: str) -> int:
    """The instructions callgrind counted, from its closing lines."""
    found = _COLLECTED.findall(valgrind_output)
    if len(found) != 1:
        raise RuntimeError(f"no instruction count in valgrind's output: {valgrind_output[-300:]}")
    return int(found[0])


def per_run(small: int, large: int, runs: int) -> float:
    """Instructions per further run, from counts of ``WARM`` and ``WARM + runs`` runs."""
    if runs <= 0 or large <= small:
        raise ValueError(f"cannot difference {small} and {large} over {runs} runs")
    return (large - small) / runs


def run_child(
    checkout: Path, runs: int, *, prefix: Sequence[str] = (), env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The child (``_CHILD``) doing ``runs`` W1 runs in ``checkout``, run under ``prefix``
    (valgrind, say) with ``env`` added; what it printed. A failed child is an error."""
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(_CHILD)
    try:
        done = subprocess.run(
            [*prefix, sys.executable, script.name, str(checkout), str(runs)],
            cwd=checkout,
            env={
                **os.environ,
                "INTERLUDE_FLOWS": "bench.flows",
                "PYTHONHASHSEED": "0",
                **(env or {}),
            },
            capture_output=True,
            text=True,
            check=False,
        )
    finally:
        os.unlink(script.name)
    if done.returncode != 0:
        raise RuntimeError(f"the counted W1 failed in {checkout}: {done.stderr[-500:]}")
    return done


def count(checkout: Path, runs: int) -> int:
    """Instructions of one child process doing ``runs`` W1 runs in ``checkout``."""
    valgrind = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    return collected(run_child(checkout, runs, prefix=valgrind).stderr)


def differenced(
    counted: Callable[[Path, int], int], checkout: Path, runs: int, warm: int = WARM
) -> dict[str, Any]:
    """Per further run in ``checkout``: ``counted`` for ``warm`` and ``warm + runs`` runs."""
    small, large = counted(checkout, warm), counted(checkout, warm + runs)
    return {"checkout": str(checkout), "runs": runs, "per_run": per_run(small, large, runs)}


def measure(checkout: Path, runs: int) -> dict[str, Any]:
    return differenced(count, checkout, runs)


@contextmanager
def worktree(ref: str) -> Iterator[Path]:
    """A temporary checkout of ``ref``, removed afterwards."""
    where = Path(tempfile.mkdtemp(prefix="interlude-at-"))
    git = ["git", "-C", str(ROOT)]
    subprocess.run(
        [*git, "worktree", "add", "--detach", str(where), ref], check=True, capture_output=True
    )
    try:
        yield where
    finally:
        subprocess.run(
            [*git, "worktree", "remove", "--force", str(where)], check=False, capture_output=True
        )
        shutil.rmtree(where, ignore_errors=True)


# Measures a checkout: instructions per W1 run, as ``measure`` returns them.
Measure = Callable[[Path, int], dict[str, Any]]


def compare_main(
    name: str,
    description: str,
    what: str,
    measuring: Callable[[], AbstractContextManager[Measure]],
    *,
    default_runs: int,
) -> None:
    """The command of an instruction count: ``--runs``, ``--against REF``, ``--json``; counts of
    the working tree (and REF's worktree) with the ``Measure`` that ``measuring`` makes, the
    ratio printed."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawTextHelpFormatter
    )
    parser.add_argument(
        "--runs", type=int, default=default_runs, help="runs counted (after the warm ones)"
    )
    parser.add_argument("--against", metavar="REF", help="also measure git revision REF")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit(f"{name}: valgrind is not installed (apt-get install valgrind)")
    if args.runs <= 0:
        raise SystemExit(f"{name}: --runs must be positive, got {args.runs}")
    from bench.processes import exclusive

    with exclusive(name), measuring() as measure_in:
        results = {}
        if args.against:
            with worktree(args.against) as checkout:
                results[args.against] = measure_in(checkout, args.runs)
        results["working tree"] = measure_in(ROOT, args.runs)
    if args.json:
        print(json.dumps(results))
        return
    for ref, result in results.items():
        print(f"{ref}: {result['per_run']:,.0f} {what} per W1 run ({args.runs} runs)")
    if args.against:
        ratio = results["working tree"]["per_run"] / results[args.against]["per_run"]
        print(f"working tree / {args.against}: {ratio:.4f}")


def main() -> None:
    compare_main(
        "bench.w1_instructions",
        __doc__ or "",
        "instructions",
        lambda: nullcontext(measure),
        default_runs=200,
    )


if __name__ == "__main__":
    main()
