"""Purging finished runs: what ``interlude purge --finished-before DATE`` does.

Runs that finished (succeeded, failed, cancelled, expired) before the cutoff go with their
checkpoints, events, interrupts, resume attempts and effects, one transaction per batch of
runs, so a purge that stops part-way leaves whole runs, never half of one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from models import retention as retention_store
from models.db import transaction
from worker import arguments

DEFAULT_BATCH = 500


@dataclass(frozen=True)
class PurgeReport:
    """Rows per table: counted (a dry run) or deleted."""

    finished_before: datetime
    dry_run: bool
    rows: dict[str, int] = field(default_factory=dict)
    batches: int = 0


def purge_finished_runs(
    finished_before: datetime, *, dry_run: bool = True, batch: int = DEFAULT_BATCH
) -> PurgeReport:
    """Count (``dry_run``) or delete the runs that finished before ``finished_before``."""
    finished_before = arguments.moment("finished_before", finished_before)
    # Only True counts: a falsy stand-in (None, 0, "") would delete where a count was meant.
    dry_run = arguments.flag("dry_run", dry_run)
    batch = arguments.count("purge batch", batch)
    if dry_run:
        with transaction(readonly=True) as session:
            counted = retention_store.count_purgeable(session, finished_before)
        return PurgeReport(finished_before, True, counted)
    total = dict.fromkeys(retention_store.PURGED_TABLES, 0)
    batches = 0
    while True:
        with transaction() as session:
            deleted = retention_store.purge_finished_runs(session, finished_before, limit=batch)
        if not deleted["runs"]:
            return PurgeReport(finished_before, False, total, batches)
        batches += 1
        for table, count in deleted.items():
            total[table] += count
