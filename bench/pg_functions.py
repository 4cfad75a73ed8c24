"""Where the server's instructions per W1 run go, function by function.

    .venv/bin/python -m bench.pg_functions [--runs 60] [--top 40] [--json]

``bench.pg_instructions`` by part: the same private PostgreSQL under callgrind and the same
in-process W1, counted for ``WARM`` and ``WARM`` + N runs. Each new server process's counts are
read with ``callgrind_annotate --inclusive=yes`` and summed by function; the difference over N
is what each further run costs in each function and all it calls. Inclusive counts overlap (a
caller's count holds its callees'): read each against the run's total, as a share of the
server's work (the executor's start-up, the foreign-key checks, index upkeep, JSON input).
Functions the binary names only by address are left out.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
from collections import Counter
from pathlib import Path
from typing import Any

from bench.pg_instructions import WARM, counted_processes, counting_server
from bench.processes import exclusive
from bench.w1_instructions import ROOT

# ``  1,234,567 (12.34%)  file.c:function [binary]`` (file and binary may be missing).
_LINE = re.compile(r"^\s*([\d,]+) \(\s*[\d.]+%\)\s+(?:\S*:)?(\S+?)(?: \[.*\])?$")


def parse_inclusive(text: str) -> Counter[str]:
    """Instructions by function from ``callgrind_annotate --inclusive=yes``'s output."""
    found: Counter[str] = Counter()
    for line in text.splitlines():
        match = _LINE.match(line)
        if match is None or match.group(2).startswith("0x") or "TOTALS" in line:
            continue
        found[match.group(2)] += int(match.group(1).replace(",", ""))
    return found


def by_function(where: Path, files: list[str]) -> Counter[str]:
    total: Counter[str] = Counter()
    for name in files:
        annotated = subprocess.run(
            ["callgrind_annotate", "--inclusive=yes", "--threshold=100", str(where / name)],
            check=True,
            capture_output=True,
            text=True,
        )
        total.update(parse_inclusive(annotated.stdout))
    return total


def measure(runs: int) -> dict[str, Any]:
    """Per further W1 run: the server's instructions in all, and by function (inclusive)."""
    with counting_server() as (dsn, where):
        counted = [counted_processes(ROOT, n, dsn, where) for n in (WARM, WARM + runs)]
        small, large = (by_function(where, list(c)) for c in counted)
        total = (sum(counted[1].values()) - sum(counted[0].values())) / runs
    functions = {name: (large[name] - small[name]) / runs for name in large}
    return {"runs": runs, "per_run": total, "functions": functions}


def report(found: dict[str, Any], top: int) -> str:
    total = found["per_run"]
    lines = [f"{total:,.0f} server instructions per W1 run ({found['runs']} runs); by function,"]
    lines.append("each with all it calls (inclusive; the parts overlap):")
    ranked = sorted(found["functions"].items(), key=lambda item: -item[1])[:top]
    lines += [
        f"  {per_run:12,.0f}  {100 * per_run / total:5.1f} %  {name}" for name, per_run in ranked
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=60, help="runs counted (after the warm ones)")
    parser.add_argument("--top", type=int, default=40, help="functions printed")
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    for tool in ("valgrind", "callgrind_annotate"):
        if shutil.which(tool) is None:
            raise SystemExit(
                f"bench.pg_functions: {tool} is not installed (apt-get install valgrind)"
            )
    with exclusive("bench.pg_functions"):
        found = measure(args.runs)
    print(json.dumps(found) if args.json else report(found, args.top))


if __name__ == "__main__":
    main()
