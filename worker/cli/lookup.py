"""What several verbs look up: ids from the prefixes people type, and a run's timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from models.contracts import ResumeAttemptView
    from worker.cli.timeline import Entry

# A run's timeline shows its newest attempts and every accepted one; ``runs attempts`` all.
RECENT_ATTEMPTS = 50


def resolve_run(given: str) -> str:
    """The whole id of the one run ``given`` is the id or a unique prefix (6+) of."""
    from worker.ids import resolve_run_id

    return resolve_run_id(given)


def resolve_interrupt(given: str) -> str:
    """The whole id of the one interrupt ``given`` is the id or a unique prefix (6+) of."""
    from worker.ids import resolve_interrupt_id

    return resolve_interrupt_id(given)


def shown_attempts(run_id: str, recent: int = RECENT_ATTEMPTS) -> list[ResumeAttemptView]:
    """The run's newest ``recent`` resume attempts and every accepted one, newest first:
    however many refusals were recorded, the accepted attempt is never crowded out."""
    from models.enums import ResumeOutcome
    from worker import list_resume_attempts

    newest = list_resume_attempts(run_id=run_id, limit=recent)
    accepted = list_resume_attempts(run_id=run_id, outcome=ResumeOutcome.ACCEPTED)
    merged = {attempt.id: attempt for attempt in [*newest, *accepted]}
    return sorted(merged.values(), key=lambda attempt: attempt.id, reverse=True)


def entries_of(run_id: str) -> list[Entry]:
    """The run's timeline, from all of its records (its attempts as ``shown_attempts``)."""
    from worker import list_interrupts
    from worker.cli.timeline import timeline
    from worker.runs import list_checkpoints, list_effects, list_events

    return timeline(
        list_checkpoints(run_id),
        list_events(run_id),
        list_effects(run_id),
        list_interrupts(run_id=run_id),
        shown_attempts(run_id),
    )
