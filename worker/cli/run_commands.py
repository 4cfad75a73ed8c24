"""``interlude runs``: start, list, show (a timeline), cancel and pause runs (more verbs in
``worker.cli.run_actions``)."""

from __future__ import annotations

import argparse
from datetime import datetime
from typing import TYPE_CHECKING

from models.enums import RunState

if TYPE_CHECKING:
    from models.contracts import EventView
from worker.cli.attempts import attempt_counts
from worker.cli.attempts import register as register_attempts
from worker.cli.exits import BAD_INPUT, OK, CliError
from worker.cli.history_commands import register as register_history
from worker.cli.inputs import parse_json
from worker.cli.lookup import resolve_run
from worker.cli.output import Output
from worker.cli.parser import (
    Parser,
    Subparsers,
    choice_of,
    group,
    id_text,
    name_text,
    one_of,
    positive_int,
    reason_text,
    verb,
)
from worker.cli.run_actions import (
    act,
    bulk_cancel,
    follow,
    operator,
    operator_options,
    register_verbs,
    selection_options,
)
from worker.present.formats import age, jsonable, seconds_since, timestamp, until

DEFAULT_LIMIT = 50
WAITING = RunState.WAITING.value


def register(sub: Subparsers, common: Parser) -> None:
    runs = group(sub, "runs", "start, list, inspect, wait for, cancel, pause and retry runs")

    start = verb(runs, "start", _start, "start a run of a flow", common)
    start.add_argument("flow", metavar="FLOW", type=name_text, help="the flow's name")
    start.add_argument("--input", metavar="JSON|@FILE", help="the run's input (default {})")
    start.add_argument(
        "--idempotency-key", metavar="K", type=name_text, help="the same key starts one run"
    )
    start.add_argument("--started-by", metavar="A", type=name_text, help="who starts it (recorded)")

    listing = verb(runs, "list", _list, "list runs, newest first", common)
    _filters(listing)
    listing.add_argument(
        "--limit", metavar="N", type=positive_int, default=DEFAULT_LIMIT, help="at most N runs"
    )

    show = verb(
        runs,
        "show",
        _show,
        "a run and its timeline: one row per event, with its actor",
        common,
    )
    show.add_argument(
        "run_id", metavar="RUN_ID", type=id_text, help="the run's id or a unique prefix (6+)"
    )
    show.add_argument(
        "--follow",
        action="store_true",
        help="keep printing new timeline rows until the run finishes (exit status as runs wait)",
    )
    show.add_argument(
        "--traceback",
        action="store_true",
        help="and the traceback of the step's latest failure, as the worker recorded it",
    )

    cancel = verb(
        runs,
        "cancel",
        _cancel,
        "cancel a run, or every run a selection matches (after a confirmation), "
        "and close their pending interrupts",
        common,
    )
    cancel.add_argument(
        "run_id",
        metavar="RUN_ID",
        type=id_text,
        nargs="?",
        help="the run's id or a unique prefix (6+)",
    )
    cancel.add_argument(
        "--actor", metavar="A", type=name_text, required=True, help="who cancels (recorded)"
    )
    cancel.add_argument(
        "--reason", metavar="R", type=reason_text, default="", help="why (recorded)"
    )
    _filters(cancel, " (instead of RUN_ID)")
    cancel.add_argument(
        "--yes", action="store_true", help="cancel a selection without asking for confirmation"
    )
    operator_options(cancel)

    pause = verb(
        runs,
        "pause",
        _pause,
        "stop a run at its next step boundary with an operator interrupt",
        common,
    )
    pause.add_argument(
        "run_id", metavar="RUN_ID", type=id_text, help="the run's id or a unique prefix (6+)"
    )
    pause.add_argument(
        "--actor", metavar="A", type=name_text, required=True, help="who pauses (recorded)"
    )
    operator_options(pause)
    register_verbs(runs, common)
    register_history(runs, common)
    register_attempts(runs, common, of="run")


def _filters(parser: argparse.ArgumentParser, suffix: str = "") -> None:
    parser.add_argument(
        "--state",
        metavar="S",
        type=choice_of(RunState, "state"),
        help=f"only runs in this state: {one_of(RunState)}{suffix}",
    )
    parser.add_argument(
        "--flow", metavar="F", type=name_text, help=f"only runs of this flow{suffix}"
    )
    selection_options(parser)


def waiting_for(state: str, since: datetime | None) -> float | None:
    """Seconds a run has waited (None unless it waits): the same figure on every surface."""
    return round(seconds_since(since), 3) if state == WAITING and since is not None else None


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
    from models.db import utcnow
    from worker.operate import find_runs
    from worker.ops.waiting import waiting_since

    found = find_runs(
        state=args.state,
        flow=args.flow,
        started_by=args.started_by,
        started_before=utcnow() - args.older_than if args.older_than is not None else None,
        limit=args.limit,
    )
    since = waiting_since([r.id for r in found if r.state == WAITING])
    if out.as_json:
        out.json(
            [
                {**jsonable(run), "waiting_seconds": waiting_for(run.state, since.get(run.id))}
                for run in found
            ]
        )
        return OK
    out.table(
        ["run", "flow", "state", "next step", "age", "created"],
        [
            (
                out.id(run.id),
                f"{run.flow_name} v{run.flow_version}",
                run.state,
                run.next_step or "-",
                f"waiting {age(since[run.id])}"
                if run.id in since
                else f"{age(run.created_at)} old",
                timestamp(run.created_at),
            )
            for run in found
        ],
        title=f"runs ({len(found)})",
        keep=("run",),
    )
    return OK


def _show(args: argparse.Namespace, out: Output) -> int:
    from worker import count_resume_attempts, get_run, list_interrupts
    from worker.interrupts import attempts_in_view
    from worker.ops.waiting import waiting_since
    from worker.present.timeline import timeline
    from worker.runs import list_checkpoints, list_effects, list_events

    run = get_run(resolve_run(args.run_id))
    checkpoints = list_checkpoints(run.id)
    events = list_events(run.id)
    effects = list_effects(run.id)
    interrupts = list_interrupts(run_id=run.id)
    attempts = attempts_in_view(run.id)
    counts = count_resume_attempts(run_id=run.id)
    entries = timeline(checkpoints, events, effects, interrupts, attempts)
    since = waiting_since([run.id]).get(run.id)
    if out.as_json and args.follow:
        raise CliError("--follow prints a timeline for people; use runs wait --json", BAD_INPUT)
    failed = last_failure(events) if args.traceback else None
    if out.as_json:
        traceback = {"traceback": failed and failed.detail["traceback"]} if args.traceback else {}
        out.json(
            {
                **traceback,
                "run": {**jsonable(run), "waiting_seconds": waiting_for(run.state, since)},
                "checkpoints": checkpoints,
                "interrupts": interrupts,
                # The newest attempts and every accepted one; ``runs attempts`` pages all.
                "resume_attempts": attempts,
                "resume_attempt_counts": counts,
                "effects": effects,
                "events": events,
                "timeline": entries,
            }
        )
        return OK
    state = run.state
    if state == WAITING and since is not None:
        state += f" for {age(since)}"
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
            ("resume attempts", attempt_counts(counts)),
        ]
    )
    for pending in run.pending_interrupts:
        out.line(
            f"waiting on interrupt {out.id(pending.id)} ({pending.kind} {pending.name!r}), "
            f"deadline {until(pending.deadline)}: interlude interrupts show {out.id(pending.id)}"
        )
    if run.forked_from is not None:
        out.line(f"forked from run {out.id(run.forked_from)} at checkpoint {run.forked_at}")
    for fork in run.forks:
        out.line(f"forked as run {out.id(fork)}: interlude runs show {out.id(fork)}")
    for kept in run.kept_events:
        out.line(
            f"kept event {kept.name!r} from {kept.sender}, arrived {timestamp(kept.arrived_at)}: "
            "it answers the run's wait for it"
        )
    for asked in run.ask_groups:
        out.line(
            f"ask group {asked.group!r}: needs {asked.need}, {asked.still_needed} more; "
            f"answered: {', '.join(asked.answered) or '-'}; open: {', '.join(asked.open) or '-'}"
            + (f"; closed: {', '.join(asked.closed)}" if asked.closed else "")
        )
    if sum(counts.values()) > len(attempts):
        out.line(
            f"the timeline shows the newest {len(attempts)} resume attempts and every accepted "
            f"one: interlude runs attempts {out.id(run.id)} lists them all"
        )
    out.line()
    out.table(
        ["at", "what", "actor", "detail"],
        [(timestamp(e.at, precise=True), e.what, e.actor, out.cut(e.detail)) for e in entries],
        title="timeline (UTC)" + ("" if out.wide else "; --wide for full details"),
        keep=("at", "what"),
    )
    if args.traceback:
        out.line()
        if failed is None:
            out.line("no traceback: no step of this run has failed")
        else:
            attempt = failed.detail.get("attempt", "?")
            out.line(f"traceback of step {failed.detail.get('step')!r}, attempt {attempt}:")
            out.line(failed.detail["traceback"])
    if args.follow:
        return follow(run.id, out, shown=entries)
    return OK


def last_failure(events: list[EventView]) -> EventView | None:
    """The run's latest failed attempt (a retry or a failure) that kept its traceback."""
    for event in reversed(events):
        kept = isinstance(event.detail, dict) and isinstance(event.detail.get("traceback"), str)
        if event.trigger in ("fail", "retry") and kept:
            return event
    return None


def _cancel(args: argparse.Namespace, out: Output) -> int:
    from worker import cancel_run, get_run

    if args.run_id is None:
        return bulk_cancel(args, out)
    if any((args.flow, args.state, args.older_than, args.started_by)):
        raise CliError("give RUN_ID or a selection (--flow, --state, ...), not both", BAD_INPUT)
    run_id = resolve_run(args.run_id)
    by = act(cancel_run, run_id, operator(args), reason=args.reason)
    state = get_run(run_id).state
    if out.as_json:
        out.json({"id": run_id, "state": state, "cancelled_by": by})
    else:
        out.line(f"run {run_id} cancelled by {by}")
    return OK


def _pause(args: argparse.Namespace, out: Output) -> int:
    from worker import pause_run

    run_id = resolve_run(args.run_id)
    by = act(pause_run, run_id, operator(args))
    if out.as_json:
        out.json({"id": run_id, "pause_requested_by": by})
    else:
        out.line(
            f"pause requested for run {run_id} by {by}: it stops at its next "
            "step boundary with an operator interrupt"
        )
    return OK
