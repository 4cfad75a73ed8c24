"""``interlude runs attempts`` and ``interlude interrupts attempts``: every resume attempt of a
run or of an interrupt, newest first, a page at a time (``--before`` the last id shown)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from models.enums import ResumeOutcome
from worker.cli.exits import OK
from worker.cli.output import Output
from worker.cli.parser import (
    Parser,
    Subparsers,
    bounded_int,
    choice_of,
    id_text,
    one_of,
    positive_int,
    verb,
)
from worker.present.formats import timestamp

if TYPE_CHECKING:
    from models.contracts import ResumeAttemptView

DEFAULT_LIMIT = 50
# Attempt ids are 64-bit.
MAX_ATTEMPT_ID = 2**63 - 1


def register(parent: Subparsers, common: Parser, *, of: str) -> None:
    """The ``attempts`` verb of ``runs`` (``of="run"``) or of ``interrupts``."""
    metavar = f"{of.upper()}_ID"
    parser = verb(
        parent,
        "attempts",
        _attempts_of_run if of == "run" else _attempts_of_interrupt,
        f"the resume attempts of {'a run' if of == 'run' else 'an interrupt'}, newest first, "
        "with their counts by outcome",
        common,
    )
    parser.add_argument(
        "target", metavar=metavar, type=id_text, help=f"the {of}'s id or a unique prefix (6+)"
    )
    parser.add_argument(
        "--outcome",
        metavar="O",
        type=choice_of(ResumeOutcome, "outcome"),
        help=f"only attempts with this outcome: {one_of(ResumeOutcome)}",
    )
    parser.add_argument(
        "--limit", metavar="N", type=positive_int, default=DEFAULT_LIMIT, help="at most N"
    )
    parser.add_argument(
        "--before",
        metavar="ATTEMPT_ID",
        type=bounded_int(MAX_ATTEMPT_ID),
        help="only attempts older than this one (the next page: the last id shown)",
    )


def _attempts_of_run(args: argparse.Namespace, out: Output) -> int:
    from worker.cli.lookup import resolve_run

    return _list(args, out, "run", resolve_run(args.target))


def _attempts_of_interrupt(args: argparse.Namespace, out: Output) -> int:
    from worker.cli.lookup import resolve_interrupt

    return _list(args, out, "interrupt", resolve_interrupt(args.target))


def _list(args: argparse.Namespace, out: Output, of: str, target: str) -> int:
    from worker import count_resume_attempts, list_resume_attempts

    scope = {"run_id": target} if of == "run" else {"interrupt_id": target}
    # One more than asked tells whether an older page exists.
    found = list_resume_attempts(
        **scope, limit=args.limit + 1, before=args.before, outcome=args.outcome
    )
    page, more = found[: args.limit], len(found) > args.limit
    counts = count_resume_attempts(**scope)
    next_before = page[-1].id if more else None
    if out.as_json:
        out.json(
            {f"{of}_id": target, "counts": counts, "attempts": page, "next_before": next_before}
        )
        return OK
    out.line(f"resume attempts of {of} {target}: {attempt_counts(counts)}")
    out.table(
        ["attempt", "at", "outcome", "actor", "interrupt" if of == "run" else "run", "reason"],
        [_row(attempt, out, of) for attempt in page],
        title=f"newest first ({len(page)} shown, UTC)",
        keep=("attempt", "at"),
    )
    if next_before is not None:
        again = f"interlude {of}s attempts {out.id(target)} --before {next_before}"
        if args.outcome:
            again += f" --outcome {args.outcome}"
        if args.limit != DEFAULT_LIMIT:
            again += f" --limit {args.limit}"
        out.line(f"older attempts: {again}")
    return OK


def attempt_counts(counts: dict[str, int]) -> str:
    """``1204 (accepted 1, malformed 1203)``: attempts by outcome, accepted first, then the
    most frequent."""
    total = sum(counts.values())
    if not total:
        return "none"
    ranked = sorted(counts.items(), key=lambda item: (item[0] != "accepted", -item[1], item[0]))
    return f"{total} ({', '.join(f'{outcome} {n}' for outcome, n in ranked)})"


def _row(attempt: ResumeAttemptView, out: Output, of: str) -> tuple[str, ...]:
    from worker.present.timeline import attempt_actor

    other = attempt.interrupt_id if of == "run" else attempt.run_id
    return (
        str(attempt.id),
        timestamp(attempt.at, precise=True),
        attempt.outcome,
        attempt_actor(attempt),
        out.id(other),
        out.cut(attempt.reason),
    )
