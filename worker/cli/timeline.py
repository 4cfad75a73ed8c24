"""One chronological list of what happened to a run, merged from its records."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from pydantic import BaseModel, ConfigDict

from models.contracts import (
    CheckpointView,
    EffectView,
    EventView,
    InterruptView,
    ResumeAttemptView,
)
from worker.cli.output import aware, compact, timestamp


class Entry(BaseModel):
    model_config = ConfigDict(frozen=True)

    at: datetime
    what: str
    actor: str
    detail: str
    # Which record it came from, and its id, for scripts that want to follow it up.
    source: str
    ref: str


# Records written in one transaction share a moment; show them in causal order.
_RANK = {"event": 0, "checkpoint": 1, "effect": 2, "interrupt": 3, "resume_attempt": 4}


def timeline(
    checkpoints: Iterable[CheckpointView],
    events: Iterable[EventView],
    effects: Iterable[EffectView],
    interrupts: Iterable[InterruptView],
    attempts: Iterable[ResumeAttemptView],
) -> list[Entry]:
    entries = [_event(e) for e in events]
    entries += [_checkpoint(c) for c in checkpoints]
    entries += [_effect(e) for e in effects]
    for interrupt in interrupts:
        entries += _interrupt(interrupt)
    entries += [_attempt(a) for a in attempts]
    return sorted(entries, key=lambda e: (aware(e.at), _RANK[e.source]))


def _event(event: EventView) -> Entry:
    what = event.trigger
    if event.to_state is not None:
        what += f" {event.from_state or '∅'} → {event.to_state}"
    return Entry(
        at=event.at,
        what=what,
        actor=event.actor,
        detail=compact(event.detail) if event.detail else "",
        source="event",
        ref=str(event.id),
    )


def _checkpoint(checkpoint: CheckpointView) -> Entry:
    after = f"after step {checkpoint.step}" if checkpoint.step else "initial"
    detail = f"{after}, next {checkpoint.next_step or 'end'}"
    if checkpoint.effects:
        detail += f", {len(checkpoint.effects)} effect(s)"
    if checkpoint.budget_consumed:
        detail += f", budget used {checkpoint.budget_consumed:g}"
    return Entry(
        at=checkpoint.created_at,
        what=f"checkpoint #{checkpoint.seq}",
        actor=f"epoch {checkpoint.epoch}",
        detail=detail,
        source="checkpoint",
        ref=checkpoint.id,
    )


def _effect(effect: EffectView) -> Entry:
    detail = f"{effect.name!r} in step {effect.step}, key {effect.idempotency_key}"
    if effect.receipt is not None:
        detail += f", receipt {compact(effect.receipt, 60)}"
    if effect.error:
        detail += f", error {effect.error}"
    return Entry(
        at=effect.created_at,
        what=f"effect {effect.status}",
        actor=f"epoch {effect.epoch}",
        detail=detail,
        source="effect",
        ref=str(effect.id),
    )


def _interrupt(interrupt: InterruptView) -> list[Entry]:
    opened = Entry(
        at=interrupt.created_at,
        what=f"interrupt {interrupt.kind}",
        actor="-",
        detail=(
            f"{interrupt.name!r} {interrupt.id} ({interrupt.status}): {interrupt.reason or '-'}; "
            f"roles {', '.join(interrupt.roles)}; deadline {timestamp(interrupt.deadline)}"
        ),
        source="interrupt",
        ref=interrupt.id,
    )
    if interrupt.resolved_at is None:
        return [opened]
    closed = f"{interrupt.decision or interrupt.status}"
    if interrupt.resume_input:
        closed += f", input {compact(interrupt.resume_input, 60)}"
    if interrupt.superseded_by:
        closed += f", superseded by {interrupt.superseded_by}"
    return [
        opened,
        Entry(
            at=interrupt.resolved_at,
            what=f"interrupt {interrupt.status}",
            actor=interrupt.resolved_by or "-",
            detail=f"{interrupt.name!r} {interrupt.id}: {closed}",
            source="interrupt",
            ref=interrupt.id,
        ),
    ]


def _attempt(attempt: ResumeAttemptView) -> Entry:
    return Entry(
        at=attempt.at,
        what=f"resume {attempt.outcome}",
        actor=attempt.actor_id or "?",
        detail=f"attempt {attempt.id}: {attempt.reason}",
        source="resume_attempt",
        ref=str(attempt.id),
    )
