"""``interlude runs``: start, list, show (a timeline), cancel and pause runs."""

from __future__ import annotations

import argparse

from models.enums import RunState
from worker.cli.exits import OK
from worker.cli.inputs import parse_json
from worker.cli.output import Output, age, jsonable, seconds_since, timestamp, until
from worker.cli.parser import Parser, Subparsers, choice_of, group, one_of, positive_int, verb

DEFAULT_LIMIT = 50


def register(sub: Subparsers, common: Parser) -> None:
    runs = group(sub, "runs", "start, list, inspect, cancel and pause runs")

    start = verb(runs, "start", _start, "start a run of a flow", common)
    start.add_argument("flow", metavar="FLOW", help="the flow's name")
    start.add_argument("--input", metavar="JSON|@FILE", help="the run's input (default {})")
    start.add_argument("--idempotency-key", metavar="K", help="the same key starts one run")
    start.add_argument("--started-by", metavar="A", help="who starts it (recorded)")

    listing = verb(runs, "list", _list, "list runs, newest first", common)
    listing.add_argument(
        "--state",
        metavar="S",
        type=choice_of(RunState, "state"),
        help=f"only runs in this state: {one_of(RunState)}",
    )
    listing.add_argument("--flow", metavar="F", help="only runs of this flow")
    listing.add_argument(
        "--limit", metavar="N", type=positive_int, default=DEFAULT_LIMIT, help="at most N runs"
    )

    show = verb(
        runs,
        "show",
        _show,
        "a run and its timeline: checkpoints, interrupts, resume attempts, effects, events",
        common,
    )
    show.add_argument("run_id", metavar="RUN_ID")

    cancel = verb(runs, "cancel", _cancel, "cancel a run and close its pending interrupts", common)
    cancel.add_argument("run_id", metavar="RUN_ID")
    cancel.add_argument("--actor", metavar="A", required=True, help="who cancels (recorded)")
    cancel.add_argument("--reason", metavar="R", default="", help="why (recorded)")

    pause = verb(
        runs,
        "pause",
        _pause,
        "stop a run at its next step boundary with an operator interrupt",
        common,
    )
    pause.add_argument("run_id", metavar="RUN_ID")
    pause.add_argument("--actor", metavar="A", required=True, help="who pauses (recorded)")


def _start(args: argparse.Namespace, out: Output) -> int:
    from worker import enqueue_run

    value = parse_json(args.input, "--input") if args.input is not None else None
    run_id = enqueue_run(
        args.flow, value, idempotency_key=args.idempotency_key, started_by=args.started_by
    )
    if out.as_json:
        out.json({"id": run_id, "flow": args.flow})
    else:
        out.line(f"started run {run_id} of flow {args.flow}")
    return OK


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker import list_runs

    found = list_runs(state=args.state, flow=args.flow, limit=args.limit)
    if out.as_json:
        out.json(
            [
                {
                    **jsonable(run),
                    # A waiting run has not moved since it suspended: its last update.
                    "waiting_seconds": round(seconds_since(run.updated_at), 3)
                    if run.state == "waiting"
                    else None,
                }
                for run in found
            ]
        )
        return OK
    out.table(
        ["run", "flow", "state", "next step", "age", "created"],
        [
            (
                run.id,
                f"{run.flow_name} v{run.flow_version}",
                run.state,
                run.next_step or "-",
                f"waiting {age(run.updated_at)}"
                if run.state == "waiting"
                else f"{age(run.created_at)} old",
                timestamp(run.created_at),
            )
            for run in found
        ],
        title=f"runs ({len(found)})",
    )
    return OK


def _show(args: argparse.Namespace, out: Output) -> int:
    from worker import get_run, list_interrupts, list_resume_attempts
    from worker.cli.timeline import timeline
    from worker.runs import list_checkpoints, list_effects, list_events

    run = get_run(args.run_id)
    checkpoints = list_checkpoints(run.id)
    events = list_events(run.id)
    effects = list_effects(run.id)
    interrupts = list_interrupts(run_id=run.id)
    attempts = list_resume_attempts(run_id=run.id)
    entries = timeline(checkpoints, events, effects, interrupts, attempts)
    if out.as_json:
        out.json(
            {
                "run": run,
                "checkpoints": checkpoints,
                "interrupts": interrupts,
                "resume_attempts": attempts,
                "effects": effects,
                "events": events,
                "timeline": entries,
            }
        )
        return OK
    state = run.state
    if state == "waiting":
        state += f" for {age(run.updated_at)}"
    out.pairs(
        [
            ("run", run.id),
            ("flow", f"{run.flow_name} v{run.flow_version}"),
            ("state", state),
            ("next step", run.next_step or "-"),
            ("started by", run.started_by or "-"),
            ("created", f"{timestamp(run.created_at)} ({age(run.created_at)} ago)"),
            ("finished", timestamp(run.finished_at)),
            ("input", run.input),
            ("output", run.output),
            ("error", run.error or "-"),
            ("pause requested by", run.pause_requested_by or "-"),
        ]
    )
    for pending in run.pending_interrupts:
        out.line(
            f"waiting on interrupt {pending.id} ({pending.kind} {pending.name!r}), "
            f"deadline {until(pending.deadline)}: interlude interrupts show {pending.id}"
        )
    out.line()
    out.table(
        ["at", "what", "actor", "detail"],
        [(timestamp(e.at, precise=True), e.what, e.actor, e.detail) for e in entries],
        title="timeline (UTC)",
    )
    return OK


def _cancel(args: argparse.Namespace, out: Output) -> int:
    from worker import cancel_run, get_run

    cancel_run(args.run_id, actor=args.actor, reason=args.reason)
    state = get_run(args.run_id).state
    if out.as_json:
        out.json({"id": args.run_id, "state": state, "cancelled_by": args.actor})
    else:
        out.line(f"run {args.run_id} cancelled by {args.actor}")
    return OK


def _pause(args: argparse.Namespace, out: Output) -> int:
    from worker import pause_run

    pause_run(args.run_id, actor=args.actor)
    if out.as_json:
        out.json({"id": args.run_id, "pause_requested_by": args.actor})
    else:
        out.line(
            f"pause requested for run {args.run_id} by {args.actor}: it stops at its next "
            "step boundary with an operator interrupt"
        )
    return OK
