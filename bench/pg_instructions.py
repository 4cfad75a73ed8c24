"""Instructions PostgreSQL executes per W1 run: the server's side of ``bench.w1_instructions``.

    .venv/bin/python -m bench.pg_instructions [--runs 100] [--against REF] [--json]

The server is where a W1 run spends most of the machine's CPU beyond Celery's hop, and its
CPU time moves with the machine's load as much as the rest. This starts a private PostgreSQL
(the machine's own binaries, a new cluster in a temporary directory, its own port; fsync and
``synchronous_commit`` as shipped; autovacuum off and no timed checkpoints, so that nothing runs
beside the workload at moments of its own) under valgrind's callgrind, following every server
process it forks. The W1 of ``bench.w1_in_process`` (``bench.w1_instructions``'s child:
enqueue, the first step, the resume through ``submit_resume``, the final step with its effect)
runs against it, once with ``WARM``
and once with ``WARM + runs`` runs; the instructions of the server processes each started are
summed and differenced, so that the migration, the first statements' planning and the scratch
database's creation cancel out. What is left is what the server executes for each further run:
parsing, planning, executing, index and constraint upkeep, WAL records. Two measurements of the
same code agree to about 0.1 %. The count per run grows with what the database holds (dead row
versions, deeper indexes): compare counts of the same ``--runs``.

``--against REF`` measures the git revision REF (a temporary worktree: its migrations and its
statements) and then the working tree, against the same server, and prints the ratio.

Needs valgrind (``apt-get install valgrind``) and PostgreSQL's server binaries (``initdb``,
``postgres``; ``BENCH_PG_BINDIR``, default the newest ``/usr/lib/postgresql/*/bin``); run as
root, the server runs as the ``postgres`` user. A side of 100 runs takes about a minute.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg

from bench.w1_instructions import ROOT, Measure, compare_main, differenced, run_child

WARM = 30
_TOTAL = re.compile(r"^(?:summary|totals): (\d+)", re.MULTILINE)
STARTUP_SECONDS = 120


def bindir() -> Path:
    """Where PostgreSQL's server binaries are."""
    given = os.environ.get("BENCH_PG_BINDIR")
    if given:
        return Path(given)
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin"), key=lambda p: int(p.parent.name or 0))
    if not found:
        raise SystemExit("bench.pg_instructions: no PostgreSQL server binaries (BENCH_PG_BINDIR)")
    return found[-1]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _as_server_user(command: list[str]) -> list[str]:
    """``command`` as the ``postgres`` user when run as root (the server refuses root)."""
    if os.geteuid() != 0:
        return command
    return ["runuser", "-u", "postgres", "--", *command]


@contextmanager
def private_server(*, callgrind: bool = True, settings: str = "") -> Iterator[tuple[str, Path]]:
    """A new PostgreSQL cluster, under callgrind unless told not to, with ``settings`` (lines
    of ``postgresql.conf``) added: its admin DSN, and where each server process writes its
    counts (``cg.<pid>``) when it exits."""
    where = Path(tempfile.mkdtemp(prefix="interlude-pg-count-"))
    if os.geteuid() == 0:
        shutil.chown(where, "postgres")
    data, port = where / "data", _free_port()
    subprocess.run(
        _as_server_user(
            [str(bindir() / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres"]
        ),
        check=True,
        capture_output=True,
    )
    with (data / "postgresql.conf").open("a") as conf:
        # No checkpoint by the clock during a count: one would make the next change of every
        # page write a full page image, at a moment that depends on valgrind's speed.
        conf.write(
            f"listen_addresses = '127.0.0.1'\nport = {port}\nautovacuum = off\n"
            "checkpoint_timeout = '1d'\nmax_wal_size = '64GB'\n" + settings
        )
    valgrind = [
        "valgrind",
        "--tool=callgrind",
        "--trace-children=yes",
        f"--callgrind-out-file={where}/cg.%p",
    ]
    server = subprocess.Popen(
        _as_server_user(
            [
                *(valgrind if callgrind else []),
                str(bindir() / "postgres"),
                "-D",
                str(data),
                "-k",
                str(where),
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=(where / "server.log").open("wb"),
    )
    dsn = f"postgresql://postgres@127.0.0.1:{port}/postgres"
    try:
        _wait_until_up(dsn, server)
        yield dsn, where
    finally:
        server.terminate()
        try:
            server.wait(60)
        except subprocess.TimeoutExpired:
            server.kill()
        shutil.rmtree(where, ignore_errors=True)


def _wait_until_up(dsn: str, server: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + STARTUP_SECONDS
    while True:
        try:
            psycopg.connect(dsn, connect_timeout=5).close()
            return
        except psycopg.OperationalError as exc:
            if server.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError("the private PostgreSQL did not start") from exc
            time.sleep(0.5)


def counts(where: Path) -> dict[str, int | None]:
    """Each server process's file and its total (None while it is being written)."""
    found: dict[str, int | None] = {}
    for path in where.glob("cg.*"):
        total = _TOTAL.search(path.read_text(errors="replace"))
        found[path.name] = int(total.group(1)) if total else None
    return found


def count(checkout: Path, runs: int, dsn: str, where: Path) -> int:
    """Instructions of the server processes started while the child did ``runs`` W1 runs."""
    return sum(counted_processes(checkout, runs, dsn, where).values())


def counted_processes(checkout: Path, runs: int, dsn: str, where: Path) -> dict[str, int]:
    """Each server process started while the child did ``runs`` W1 runs: its counts' file (in
    ``where``) and its total."""
    before = set(counts(where))
    run_child(checkout, runs, env={"INTERLUDE_BENCH_PG_DSN": dsn})
    # Each server process writes its counts as it exits, just after its client went away.
    deadline = time.monotonic() + 60
    while True:
        new = {k: v for k, v in counts(where).items() if k not in before}
        if new and all(v is not None for v in new.values()):
            time.sleep(1)
            if len(counts(where)) - len(before) == len(new):
                return {k: v for k, v in new.items() if v is not None}
        if time.monotonic() > deadline:
            raise RuntimeError("the server processes' counts were not written in time")
        time.sleep(0.5)


@contextmanager
def counting_server() -> Iterator[tuple[str, Path]]:
    """``private_server`` under callgrind, ready to count: a new cluster's first clients pay
    for work done once in its life (its first database made from the template, say), so a
    first count, not kept, takes that out of every count after it."""
    with private_server() as (dsn, where):
        count(ROOT, 1, dsn, where)
        yield dsn, where


@contextmanager
def _measuring() -> Iterator[Measure]:
    with counting_server() as (dsn, where):
        yield lambda checkout, runs: differenced(
            lambda at, n: count(at, n, dsn, where), checkout, runs, WARM
        )


def main() -> None:
    compare_main(
        "bench.pg_instructions",
        __doc__ or "",
        "server instructions",
        _measuring,
        default_runs=100,
    )


if __name__ == "__main__":
    main()
