"""``interlude purge --finished-before DATE``: count, then (with ``--yes``) delete the runs
that finished before DATE and everything recorded for them."""

from __future__ import annotations

import argparse
from datetime import UTC, datetime, timedelta

from worker.cli.exits import OK
from worker.cli.output import Output
from worker.cli.parser import Parser, Subparsers, bounded_int, shown, verb
from worker.cli.run_actions import DURATION, duration
from worker.present.formats import timestamp

DATE_LIMIT = 40
MAX_BATCH = 10_000
# A date up to this far ahead of UTC's clock is "today" somewhere (2026-11-02 typed in Tokyo
# at 02:00 local): taken as now, every run finished so far. Further ahead is a mistake.
AHEAD = timedelta(days=1)


def finished_before(text: str) -> datetime:
    """An age (``1h``, ``7d``: that long ago), ``2026-11-01`` (midnight UTC) or an ISO 8601 time
    (``2026-11-01T12:00:00Z``; UTC unless an offset says otherwise); a moment up to a day
    ahead is taken as now."""
    problem = (
        f"{shown(text)} is not a date like 2026-11-01 or 2026-11-01T12:00:00Z, nor an age "
        "like 12h or 7d"
    )
    if len(text) > DATE_LIMIT:
        raise argparse.ArgumentTypeError(problem)
    now = datetime.now(UTC)
    if DURATION.match(text) and not text.strip().isdigit():
        return now - duration(text)
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(problem) from None
    moment = moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)
    if moment > now + AHEAD:
        raise argparse.ArgumentTypeError(
            f"{shown(text)} is more than a day ahead of now ({now:%Y-%m-%dT%H:%MZ}): no run "
            "has finished then yet"
        )
    try:
        return min(moment.astimezone(UTC), now)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before the first date UTC has
        raise argparse.ArgumentTypeError(problem) from None


def register(sub: Subparsers, common: Parser) -> None:
    parser = verb(
        sub,
        "purge",
        _purge,
        "delete finished runs (succeeded, failed, cancelled, expired) and all their records",
        common,
        description=(
            "Remove the runs that finished (succeeded, failed, cancelled or expired) before DATE\n"
            "and everything recorded for them: checkpoints, events, interrupts, resume attempts\n"
            "and effects. Without --yes nothing is deleted: the rows it would delete are counted\n"
            "per table. With --yes they are deleted, one transaction per batch of runs."
        ),
    )
    parser.add_argument(
        "--finished-before",
        metavar="DATE",
        type=finished_before,
        required=True,
        help="runs that finished before this date or time (UTC unless it has an offset), "
        "or this long ago (12h, 7d)",
    )
    parser.add_argument("--yes", action="store_true", help="delete (without it: count only)")
    parser.add_argument(
        "--batch",
        metavar="N",
        type=bounded_int(MAX_BATCH),
        default=None,
        help="runs deleted per transaction (default: 500)",
    )


def _purge(args: argparse.Namespace, out: Output) -> int:
    from worker.ops.retention import DEFAULT_BATCH, purge_finished_runs

    report = purge_finished_runs(
        args.finished_before, dry_run=not args.yes, batch=args.batch or DEFAULT_BATCH
    )
    if out.as_json:
        out.json(
            {
                "finished_before": report.finished_before,
                "dry_run": report.dry_run,
                "would_delete" if report.dry_run else "deleted": report.rows,
                "batches": report.batches,
            }
        )
        return OK
    cutoff = timestamp(report.finished_before)
    if report.dry_run:
        title = f"runs finished before {cutoff} UTC: rows a purge would delete (dry run)"
    else:
        title = f"runs finished before {cutoff} UTC: rows deleted in {report.batches} batch(es)"
    out.table(["table", "rows"], list(report.rows.items()), title=title)
    if report.dry_run:
        out.line("nothing was deleted; run again with --yes to delete them")
    return OK
