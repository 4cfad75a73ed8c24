"""``interlude runs steps``, ``runs result`` and ``runs fork``: a run's history and its forks."""

from __future__ import annotations

import argparse

from models.enums import RunState
from worker.cli.exits import OK, RUN_EXIT
from worker.cli.inputs import parse_object
from worker.cli.output import Output
from worker.cli.parser import Parser, Subparsers, id_text, name_text, verb
from worker.cli.run_actions import act, operator, operator_options
from worker.present.formats import compact, timestamp

RUN_ID_HELP = "the run's id or a unique prefix (6+)"


def register(runs: Subparsers, common: Parser) -> None:
    steps = verb(runs, "steps", _steps, "each step a run executed: timing and output", common)
    steps.add_argument("run_id", metavar="RUN_ID", type=id_text, help=RUN_ID_HELP)
    result = verb(
        runs,
        "result",
        _result,
        "a finished run's result; the exit status says how it finished (as runs wait)",
        common,
    )
    result.add_argument("run_id", metavar="RUN_ID", type=id_text, help=RUN_ID_HELP)
    fork = verb(
        runs,
        "fork",
        _fork,
        "start a new run from the checkpoint before one of a run's steps",
        common,
        description=(
            "Start a new run from RUN_ID's checkpoint before step NAME (its latest, if the "
            "step ran more than once): same flow version, the state there, the origin's "
            "input or --input. Effects the origin applied from there on are not repeated "
            "(the fork finds their receipts) unless --repeat-effects. Needs one of the "
            "flow's operator roles; recorded on both runs."
        ),
    )
    fork.add_argument("run_id", metavar="RUN_ID", type=id_text, help=RUN_ID_HELP)
    fork.add_argument(
        "--from-step", metavar="NAME", type=name_text, required=True, help="the step to rerun"
    )
    fork.add_argument(
        "--input", metavar="JSON|@FILE", help="the fork's input (default: the origin's)"
    )
    fork.add_argument(
        "--repeat-effects",
        action="store_true",
        help="call again the effects the origin applied from that step on",
    )
    fork.add_argument("--actor", metavar="A", type=name_text, required=True, help="who forks")
    operator_options(fork)


def _steps(args: argparse.Namespace, out: Output) -> int:
    from worker.cli.lookup import resolve_run
    from worker.ops.step_history import list_steps

    steps = list_steps(resolve_run(args.run_id))
    if out.as_json:
        out.json([step.model_dump(mode="json") for step in steps])
        return OK
    out.table(
        ["seq", "step", "next", "started", "ms", "output", "effects"],
        [
            (
                step.seq,
                step.step,
                step.next_step or "-",
                timestamp(step.started_at, precise=True),
                "-" if step.duration_ms is None else f"{step.duration_ms:.1f}",
                out.cut(compact(step.output)),
                ", ".join(step.effects) or "-",
            )
            for step in steps
        ],
        title=f"steps ({len(steps)})",
        keep=("seq", "step"),
    )
    return OK


def _result(args: argparse.Namespace, out: Output) -> int:
    from worker import get_run
    from worker.cli.lookup import resolve_run

    run = get_run(resolve_run(args.run_id))
    state = RunState(run.state)
    status = RUN_EXIT.get(state)
    if status is None:
        from worker.cli.exits import WAIT_TIMED_OUT, CliError

        raise CliError(f"run {run.id} is {run.state}, not finished: no result yet", WAIT_TIMED_OUT)
    if out.as_json:
        out.json({"id": run.id, "state": run.state, "output": run.output, "error": run.error})
    else:
        out.line(f"run {run.id} {run.state}" + (f": {run.error}" if run.error else ""))
        out.block("output", run.output)
    return status


def _fork(args: argparse.Namespace, out: Output) -> int:
    from worker.cli.lookup import resolve_run
    from worker.forks import fork_run

    run_id = resolve_run(args.run_id)
    given = parse_object(args.input, "--input") if args.input is not None else None
    fork_id = act(
        fork_run,
        run_id,
        operator(args),
        from_step=args.from_step,
        input=given,
        repeat_effects=args.repeat_effects,
    )
    if out.as_json:
        out.json({"id": fork_id, "forked_from": run_id, "from_step": args.from_step})
    else:
        out.line(f"run {fork_id} forked from {run_id} at step {args.from_step!r}: it is queued")
    return OK
