"""``interlude runs retry|wait``, ``runs show --follow`` and bulk ``runs cancel``.

The verbs that act on a run for an operator (cancel, pause, retry) go through ``act``: the
actor authenticates with the credential read as ``interlude resume`` reads it (from
INTERLUDE_ACTOR_TOKEN or a hidden prompt, never an argument) and must hold one of the flow's
operator roles.
"""

from __future__ import annotations

import argparse
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from models.enums import RunState
from worker.cli.exits import (
    BAD_INPUT,
    OK,
    OPERATOR_DENIED,
    RUN_EXIT,
    WAIT_TIMED_OUT,
    CliError,
)
from worker.cli.inputs import TOKEN_ENV, confirm, credential
from worker.cli.output import Output, error, note
from worker.cli.parser import (
    Subparsers,
    id_text,
    name_text,
    positive_float,
    reason_text,
    shown,
    verb,
)
from worker.present.formats import timestamp

if TYPE_CHECKING:
    from worker.present.timeline import Entry

DURATION = re.compile(r"^\s*(\d{1,12}(?:\.\d{1,9})?)\s*([smhdw]?)\s*$")
# --older-than: a century back is as far as a selection needs to reach.
MAX_AGE = timedelta(days=36525)
UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
FOLLOW_POLL = 1.0


def duration(text: str) -> timedelta:
    """``90``, ``90s``, ``15m``, ``12h``, ``7d``, ``2w`` as a timedelta."""
    match = DURATION.match(text)
    if match is None:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is not a duration like 90s, 15m, 12h or 7d"
        )
    seconds = float(match.group(1)) * UNIT_SECONDS[match.group(2)]
    if seconds > MAX_AGE.total_seconds():
        raise argparse.ArgumentTypeError(f"{shown(text)} is more than {MAX_AGE.days} days")
    return timedelta(seconds=seconds)


def selection_options(parser: argparse.ArgumentParser) -> None:
    """Filters shared by ``runs list`` and bulk ``runs cancel``."""
    parser.add_argument("--started-by", metavar="A", type=name_text, help="only runs started by A")
    parser.add_argument(
        "--older-than",
        metavar="D",
        type=duration,
        help="only runs started more than D ago (90s, 15m, 12h, 7d)",
    )


def register_verbs(runs: Subparsers, common: Any) -> None:
    retry = verb(
        runs,
        "retry",
        _retry,
        "continue a failed run from its last checkpoint (its failed step runs again)",
        common,
    )
    retry.add_argument(
        "run_id", metavar="RUN_ID", type=id_text, help="the run's id or a unique prefix (6+)"
    )
    retry.add_argument(
        "--actor", metavar="A", type=name_text, required=True, help="who retries (recorded)"
    )
    retry.add_argument("--reason", metavar="R", type=reason_text, default="", help="why (recorded)")
    operator_options(retry)

    wait = verb(
        runs,
        "wait",
        _wait,
        "wait until a run finishes; the exit status says how it finished",
        common,
    )
    wait.add_argument(
        "run_id", metavar="RUN_ID", type=id_text, help="the run's id or a unique prefix (6+)"
    )
    wait.add_argument("--timeout", metavar="S", type=positive_float, help="give up after S seconds")


def operator_options(parser: argparse.ArgumentParser) -> None:
    """What cancel, pause and retry add to ``--actor``: its kind; the credential is read
    from the environment or a prompt."""
    parser.add_argument(
        "--actor-type",
        choices=["human", "service"],
        default="human",
        help=f"who the actor is (the actor authenticates: {TOKEN_ENV} or a hidden prompt)",
    )


@dataclass(frozen=True)
class Operator:
    """The operator as the command was told: ``--actor``, ``--actor-type`` and the credential."""

    actor: str
    actor_type: str
    credential: str = field(repr=False)


def operator(args: argparse.Namespace) -> Operator:
    """Who acts, with the credential from INTERLUDE_ACTOR_TOKEN or a hidden prompt."""
    return Operator(args.actor, args.actor_type, credential(args.actor))


def act(action: Callable[..., str], run_id: str, who: Operator, **options: Any) -> str:
    """Every operator action on a run goes through here; returns the actor as recorded."""
    return action(
        run_id,
        actor=who.actor,
        actor_type=who.actor_type,
        credential=who.credential,
        **options,
    )


def _retry(args: argparse.Namespace, out: Output) -> int:
    from worker.cli.lookup import resolve_run
    from worker.operate import retry_run

    run_id = resolve_run(args.run_id)
    by = act(retry_run, run_id, operator(args), reason=args.reason)
    if out.as_json:
        out.json({"id": run_id, "state": RunState.QUEUED.value, "retried_by": by})
    else:
        out.line(f"run {run_id} retried by {by}: its failed step runs again")
    return OK


def _wait(args: argparse.Namespace, out: Output) -> int:
    from models.errors import WaitTimeoutError
    from worker.cli.lookup import resolve_run
    from worker.operate import wait_for_run

    run_id = resolve_run(args.run_id)
    try:
        run = wait_for_run(run_id, timeout=args.timeout)
    except WaitTimeoutError as exc:
        raise CliError(str(exc), WAIT_TIMED_OUT) from None
    return _finished(out, run.id, run.state, run.error, run.output)


def _finished(
    out: Output, run_id: str, state: str, error: str | None, output: object = None
) -> int:
    status = RUN_EXIT[RunState(state)]
    if out.as_json:
        out.json({"id": run_id, "state": state, "error": error, "output": output, "exit": status})
    else:
        out.line(f"run {run_id} {state}" + (f": {error}" if error else ""))
    return status


def follow(run_id: str, out: Output, shown: list[Entry]) -> int:
    """After ``runs show``: print the timeline's new rows until the run finishes."""
    from worker import get_run
    from worker.cli.lookup import entries_of

    seen = {_key(entry) for entry in shown}
    note("following; Ctrl-C stops")
    while True:
        run = get_run(run_id)
        for entry in entries_of(run.id):
            if _key(entry) in seen:
                continue
            seen.add(_key(entry))
            out.line(
                f"{timestamp(entry.at, precise=True)}  {entry.what}  {entry.actor}  "
                f"{out.cut(entry.detail)}"
            )
        if RunState(run.state).terminal:
            return _finished(out, run.id, run.state, run.error)
        time.sleep(FOLLOW_POLL)


def _key(entry: Entry) -> tuple[str, str, str]:
    return (entry.source, entry.ref, entry.what)


def bulk_cancel(args: argparse.Namespace, out: Output) -> int:
    """``runs cancel`` without a RUN_ID: every run the filters select, after a confirmation."""
    from models.db import utcnow
    from models.errors import (
        ConfigurationError,
        InvalidTransitionError,
        OperatorDeniedError,
        OperatorUnauthenticatedError,
        StaleStateError,
    )
    from worker import cancel_run
    from worker.cli.exits import status_of
    from worker.operate import find_runs

    if not any((args.flow, args.state, args.older_than, args.started_by)):
        raise CliError(
            "runs cancel needs a RUN_ID or a selection (--flow, --state, --older-than, "
            "--started-by)",
            BAD_INPUT,
        )
    before = utcnow() - args.older_than if args.older_than is not None else None
    selected = find_runs(
        state=args.state,
        flow=args.flow,
        started_by=args.started_by,
        started_before=before,
        limit=None,
    )
    selected = [r for r in selected if not RunState(r.state).terminal]
    if not selected:
        if out.as_json:
            out.json({"selected": 0, "cancelled": 0, "skipped": 0, "denied": 0})
        else:
            out.line("no unfinished run matches; nothing to cancel")
        return OK
    question = f"Cancel {len(selected)} run(s)"
    if args.flow:
        question += f" of flow {args.flow}"
    # (Without a terminal the refusal says how many it would have cancelled.)
    confirm(f"{question}?", assume_yes=args.yes, what=f"cancel {len(selected)} run(s)")
    who = operator(args)
    cancelled, skipped, denied = 0, 0, []
    by = f"{who.actor_type}:{who.actor}"
    for run in selected:
        try:
            by = act(cancel_run, run.id, who, reason=args.reason)
            cancelled += 1
        except (InvalidTransitionError, StaleStateError):
            skipped += 1  # it finished (or kept moving) since it was selected
        except OperatorDeniedError:
            denied.append(run)  # a flow whose operator roles this actor does not hold
        except (OperatorUnauthenticatedError, ConfigurationError) as exc:
            # A credential refused, or a flow this process cannot tell the operators of: the
            # rest is not tried, and what was cancelled before is said, not "nothing changed".
            if cancelled == 0:
                raise  # the first one: nothing was cancelled
            said = str(exc).removesuffix("; nothing changed")
            raise CliError(
                f"{said}; {cancelled} run(s) were cancelled before", status_of(exc)
            ) from None
    if out.as_json:
        out.json(
            {
                "selected": len(selected),
                "cancelled": cancelled,
                "skipped": skipped,
                "denied": len(denied),
            }
        )
    else:
        out.line(
            f"{cancelled} run(s) cancelled by {by}"
            + (f"; {skipped} finished meanwhile and were left as they are" if skipped else "")
        )
    if denied:
        flows = sorted({r.flow_name for r in denied})
        return error(
            f"{len(denied)} run(s) not cancelled: {who.actor} holds none of the operator roles "
            f"of flow {', '.join(flows)}",
            OPERATOR_DENIED,
        )
    return OK
