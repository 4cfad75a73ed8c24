"""What several verbs look up: ids from the prefixes people type, and a run's timeline."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from worker.present.timeline import Entry


def resolve_run(given: str) -> str:
    """The whole id of the one run ``given`` is the id or a unique prefix (6+) of."""
    from worker.present.ids import resolve_run_id

    return resolve_run_id(given)


def resolve_interrupt(given: str) -> str:
    """The whole id of the one interrupt ``given`` is the id or a unique prefix (6+) of."""
    from worker.present.ids import resolve_interrupt_id

    return resolve_interrupt_id(given)


def entries_of(run_id: str) -> list[Entry]:
    """The run's timeline, from all of its records (its attempts as ``attempts_in_view``)."""
    from worker import list_interrupts
    from worker.interrupts import attempts_in_view
    from worker.present.timeline import timeline
    from worker.runs import list_checkpoints, list_effects, list_events

    return timeline(
        list_checkpoints(run_id),
        list_events(run_id),
        list_effects(run_id),
        list_interrupts(run_id=run_id),
        attempts_in_view(run_id),
    )
