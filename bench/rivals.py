"""Run a rival's benchmark script under another Python, each time in a fresh database.

The rivals (LangGraph, DBOS) are not our dependencies: their scripts run under
``--rivals-python``, a virtualenv with ``langgraph langgraph-checkpoint-postgres dbos``.
A script's last line of output is its result: a number (runs/s) or a JSON object with
``rate``. Scripts that take ``setup`` as first argument create their schema in a run of their
own, so that a counting run counts the workload alone. ``run_lanes`` runs a W1 script as
several processes at once, started together, and reads the machine's CPU around their work
(``bench.lanes``).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from bench import lanes, pg

HERE = Path(__file__).resolve().parent
TIMEOUT_SECONDS = 900


def _call(python: str, script: str, args: list[str]) -> str:
    done = subprocess.run(
        [python, str(HERE / script), *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
    )
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args[1:])} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def run(
    python: str, script: str, runs: int, *extra: str, setup: bool = False, count: bool = False
) -> dict[str, Any]:
    """``script URL RUNS *extra`` in a new database; with ``count``, also what the server saw."""
    with pg.scratch_database("rival") as name:
        url = pg.dsn(name)
        if setup:
            _call(python, script, [url, "setup"])
        if count:
            pg.log_statements(name)
            pg.quiesce(name)
            before, offset = pg.transactions(name), pg.log_offset()
        last = _call(python, script, [url, str(runs), *extra]).strip().splitlines()[-1]
        result: dict[str, Any] = json.loads(last) if last.startswith("{") else {"rate": float(last)}
        if count:
            pg.quiesce(name)
            xacts = pg.transactions(name) - before
            logged = pg.logged_statements(name, offset)
            result["counts"] = pg.costs(runs, xacts, logged, {"process": set(logged.sequences)})
    return result


def run_lanes(python: str, script: str, runs: int, processes: int, *extra: str) -> dict[str, Any]:
    """``script`` as ``processes`` processes at once in one new database, ``runs`` among them,
    started together (``bench.lanes``): their rate together and the machine's CPU per run."""
    if runs % processes:
        raise ValueError(f"{runs} runs do not share evenly among {processes} processes")
    with pg.scratch_database("rival") as name:
        url = pg.dsn(name)
        _call(python, script, [url, "setup"])
        each = [python, str(HERE / script), url, str(runs // processes), *extra]
        return lanes.run([each] * processes)
