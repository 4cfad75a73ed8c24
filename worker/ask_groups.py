"""Ask groups as people read them: per group, the asks answered, open and closed."""

from __future__ import annotations

from collections.abc import Iterable

from models.contracts import AskGroupView
from models.enums import InterruptStatus
from models.tables import Interrupt


def group_views(asks: Iterable[Interrupt]) -> list[AskGroupView]:
    """One view per group, from all its asks at one checkpoint (renewed ones included: an
    answer renewed where the step acts no longer counts, its successor does)."""
    groups: dict[str, list[Interrupt]] = {}
    for ask in asks:
        if ask.ask_group is not None:
            groups.setdefault(ask.ask_group, []).append(ask)
    views = []
    for group, members in groups.items():
        answered = [
            a.name
            for a in members
            if a.status == InterruptStatus.RESOLVED.value and a.superseded_by is None
        ]
        still_open = [a.name for a in members if a.status == InterruptStatus.PENDING.value]
        # An ask closed and asked again (a renewed review) is shown once, by its latest state.
        seen = set(answered) | set(still_open)
        closed = sorted({a.name for a in members if a.name not in seen and a.status != "resolved"})
        need = max((a.group_need or 1) for a in members)
        views.append(
            AskGroupView(
                group=group,
                need=need,
                answered=answered,
                open=still_open,
                closed=closed,
                still_needed=max(need - len(answered), 0),
            )
        )
    return views
