"""``interlude flows``: the flow versions loaded here and the runs each still has.

``flows check`` is the question to ask before a deployment retires a version: it fails when
runs exist that no flow loaded here (``INTERLUDE_FLOWS``) can continue, or would refuse: runs
at a step the continuing version lacks, or whose state its migration cannot carry.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from worker.cli.exits import FAILURE, OK
from worker.cli.output import Output, error
from worker.cli.parser import Parser, Subparsers, group, verb

if TYPE_CHECKING:
    from worker.flows.versions import FlowVersion


def register(sub: Subparsers, common: Parser) -> None:
    flows = group(sub, "flows", "flow versions loaded here and their unfinished runs")
    verb(
        flows,
        "list",
        _list,
        "every flow version loaded here or holding runs, with its unfinished runs by state",
        common,
    )
    verb(
        flows,
        "check",
        _check,
        "fail (exit 1) if unfinished runs exist that the flows loaded here cannot continue",
        common,
    )


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker.flows.versions import flow_versions

    _show(out, flow_versions())
    return OK


def _check(args: argparse.Namespace, out: Output) -> int:
    from worker.flows.versions import blocked, flow_versions

    versions = flow_versions()
    refused = blocked(versions)
    if out.as_json:
        out.json(
            {
                "ok": not refused,
                "stranded": [_json(v) for v in refused if v.stranded],
                "blocked": [_json(v) for v in refused],
            }
        )
    elif not refused:
        count = f"{len(versions)} flow version{'' if len(versions) == 1 else 's'}"
        out.line(f"ok: every unfinished run can continue here ({count})")
    for found in refused:
        where = f"flow {found.flow!r} version {found.version}"
        if found.stranded:
            waiting = ", ".join(f"{n} {state}" for state, n in found.runs.items() if n)
            error(
                f"{where} has {found.unfinished} unfinished runs ({waiting}) that no flow "
                f"loaded here can continue: keep version {found.version} registered or "
                f"declare @migrates_from({found.version})",
                FAILURE,
            )
        for problem in found.problems:
            error(f"{where}: {problem}", FAILURE)
    return FAILURE if refused else OK


def _show(out: Output, versions: list[FlowVersion]) -> None:
    if out.as_json:
        out.json([_json(v) for v in versions])
        return
    states = list(versions[0].runs) if versions else []
    rows = [[v.flow, v.version, v.status, *(v.runs[state] for state in states)] for v in versions]
    out.table(["flow", "version", "here", *states], rows, title="flow versions")


def _json(found: FlowVersion) -> dict[str, Any]:
    return {
        "flow": found.flow,
        "version": found.version,
        "registered": found.registered,
        "migrates_to": found.migrates_to,
        "status": found.status,
        "runs": found.runs,
        "stranded": found.stranded,
        "problems": list(found.problems),
    }
