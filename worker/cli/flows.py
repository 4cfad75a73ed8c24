"""``interlude flows``: the flow versions loaded here and the runs each still has.

``flows check`` is the question to ask before a deployment retires a version: it fails when
runs exist that no flow loaded here (``INTERLUDE_FLOWS``) can continue.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from worker.cli.exits import FAILURE, OK
from worker.cli.output import Output, error
from worker.cli.parser import Parser, Subparsers, group, verb

if TYPE_CHECKING:
    from worker.versions import FlowVersion


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
        "fail (exit 1) if runs exist of a version neither loaded nor migrated from here",
        common,
    )


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker.versions import flow_versions

    _show(out, flow_versions())
    return OK


def _check(args: argparse.Namespace, out: Output) -> int:
    from worker.versions import flow_versions, stranded

    versions = flow_versions()
    blocked = stranded(versions)
    if out.as_json:
        out.json({"ok": not blocked, "stranded": [_json(v) for v in blocked]})
    elif not blocked:
        out.line(f"ok: every unfinished run can continue here ({len(versions)} flow versions)")
    for found in blocked:
        waiting = ", ".join(f"{n} {state}" for state, n in found.runs.items() if n)
        error(
            f"flow {found.flow!r} version {found.version} has {found.unfinished} unfinished "
            f"runs ({waiting}) that no flow loaded here can continue: keep version "
            f"{found.version} registered or declare @migrates_from({found.version})",
            FAILURE,
        )
    return FAILURE if blocked else OK


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
    }
