"""Where W1's time goes: py-spy on the caller and on the worker's processes, wall clock.

    .venv/bin/python -m bench.profile [--runs 200] [--top 20] [--out DIR] [--cpu] [--pool solo]

With ``--cpu``, where its CPU goes instead: samples only while a thread runs (or is runnable,
waiting for a core: on a busy machine that overstates the calls that wake another process).
``--pool solo`` profiles a ``--pool solo`` worker, whose main process runs the steps.

Runs ``bench.w1`` in a process of its own and attaches ``py-spy record --idle --threads`` to it
(the caller), to the worker's main process and to its pool child (if any) as soon as each
exists, for the whole run. Prints, for each process's main thread, the top frames by own time
(waiting included: ``wait`` in psycopg is a database round trip, ``_recv`` in billiard a pool
child waiting for its next task, ``poll`` in kombu the main process waiting on the broker) and
interlude's functions by inclusive time. The raw stacks stay in ``--out``, for a flame graph.
Needs py-spy (``pip install py-spy``; not a dependency of interlude).
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from bench.processes import ROOT, children, exclusive

OURS = re.compile(r"\((worker|models|statemachine|bench)/")
# py-spy's --idle: samples taken while a thread waits too (wall clock); without, CPU only.
IDLE = ["--idle"]
RATE = "100"  # samples per second (py-spy --rate; --rate 1000 for short runs)


def _py_spy() -> str:
    found = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(found).exists():
        raise SystemExit("py-spy not found: pip install py-spy")
    return found


def _record(pid: int, out: Path, rate: str = RATE) -> subprocess.Popen[bytes]:
    options = [*IDLE, "--threads", "--nonblocking", "--format", "raw", "--rate", rate]
    return subprocess.Popen(
        [_py_spy(), "record", *options, "--output", str(out), "--pid", str(pid)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def _worker_and_child(
    caller: subprocess.Popen[bytes], solo: bool, timeout: float = 120
) -> tuple[int, int | None]:
    """The ``celery worker`` the caller started, and its pool child (none on ``--pool solo``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and caller.poll() is None:
        for worker in children(caller.pid):
            if solo:
                return worker, None
            pool = children(worker)
            if pool:
                return worker, pool[0]
        time.sleep(0.02)
    raise RuntimeError("the worker (or its pool child) did not appear")


def summarize(raw: Path, top: int, within: str = "") -> str:
    """Main-thread samples (only those under a frame named ``within``, if given), ranked."""
    own: Counter[str] = Counter()
    inclusive: Counter[str] = Counter()
    total = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not count.isdigit() or "MainThread" not in frames[0]:
            continue
        names = [re.sub(r":\d+\)$", ")", f) for f in frames[1:]] or ["(idle)"]
        if within and within not in names:
            continue
        n = int(count)
        total += n
        own[names[-1]] += n
        for name in set(names):
            inclusive[name] += n
    if not total:
        return "  (no samples)"
    lines = [f"  {total} samples of the main thread; own time:"]
    lines += [f"    {100 * n / total:5.1f}%  {name}" for name, n in own.most_common(top)]
    lines.append("  interlude's functions, inclusive time:")
    ours = [(name, n) for name, n in inclusive.most_common() if OURS.search(name)]
    lines += [f"    {100 * n / total:5.1f}%  {name}" for name, n in ours[:top]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--top", type=int, default=20)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--cpu", action="store_true", help="on-CPU samples only (where CPU goes, not time)"
    )
    parser.add_argument("--pool", choices=("prefork", "solo"), default="prefork")
    parser.add_argument("--rate", default=RATE, help="samples per second")
    args = parser.parse_args()
    if args.cpu:
        IDLE.clear()
    out = args.out or Path(tempfile.mkdtemp(prefix="bench-profile-"))
    out.mkdir(parents=True, exist_ok=True)
    caller = subprocess.Popen(
        [sys.executable, "-m", "bench.w1", "--runs", str(args.runs), "--pool", args.pool],
        cwd=ROOT,
        stdout=subprocess.PIPE,
    )
    spies = [_record(caller.pid, out / "caller.txt", args.rate)]
    worker, child = _worker_and_child(caller, solo=args.pool == "solo")
    if child is not None:
        spies.append(_record(child, out / "worker-child.txt", args.rate))
    spies.append(_record(worker, out / "worker-main.txt", args.rate))
    result, _ = caller.communicate()
    for spy in spies:
        spy.wait(60)
    print(result.decode().strip())
    # py-spy counts a thread that is runnable but waiting for a core as on-CPU too.
    what = "on-CPU or runnable" if args.cpu else "wall clock"
    if child is not None:
        print(f"worker's pool child, its whole life (py-spy, {what}, {out}/worker-child.txt):")
        print(summarize(out / "worker-child.txt", args.top))
    print(f"worker's main process (py-spy, {what}, {out}/worker-main.txt):")
    print(summarize(out / "worker-main.txt", args.top))
    print(f"caller, during the workload only (py-spy, {what}, {out}/caller.txt):")
    print(summarize(out / "caller.txt", args.top, within="_workload (bench/w1.py)"))


if __name__ == "__main__":
    with exclusive("bench.profile"):
        main()
