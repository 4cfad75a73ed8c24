"""One chronological list of what happened to a run: one row per meaningful event.

The audit events are the backbone. What other records add is folded into the event that
recorded the same moment: an interrupt's question into its ``interrupt`` event, the accepted
attempt into ``accept_resume``, a checkpoint into the step transition that wrote it. Records no
event covers (refused attempts, effects, a checkpoint or interrupt without its event) keep a row
of their own. Actors are written one way, ``kind:id``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict

from models.contracts import (
    CheckpointView,
    EffectView,
    EventView,
    InterruptView,
    ResumeAttemptView,
)
from worker.present.formats import aware, compact, timestamp

# Unbounded here; the table cuts details to its width unless --wide.
FULL = 1_000_000
# Recorded by code that passes a bare name (an operator's --actor, enqueue_run's started_by).
DEFAULT_ACTOR_KIND = "human"
ANONYMOUS_STARTER = "app"


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


def actor_label(actor: str | None) -> str:
    """``human:ada``, ``worker:celery@host``, ``system:expiry``: every actor as ``kind:id``."""
    if not actor:
        return "-"
    if ":" in actor:
        return actor
    if actor == ANONYMOUS_STARTER:
        return f"service:{actor}"
    return f"{DEFAULT_ACTOR_KIND}:{actor}"


def timeline(
    checkpoints: Iterable[CheckpointView],
    events: Iterable[EventView],
    effects: Iterable[EffectView],
    interrupts: Iterable[InterruptView],
    attempts: Iterable[ResumeAttemptView],
) -> list[Entry]:
    events = list(events)
    by_interrupt = {i.id: i for i in interrupts}
    accepted = {a.interrupt_id: a for a in attempts if a.outcome == "accepted"}
    # Which worker held each fencing epoch: its claim event says so.
    owners = {
        e.detail.get("epoch"): e.actor
        for e in events
        if e.trigger == "claim" and isinstance(e.detail, dict)
    }
    covered_interrupts: set[str] = set()
    covered_checkpoints: set[int] = {0}  # the initial checkpoint is the enqueue event's
    for event in events:
        detail = event.detail if isinstance(event.detail, dict) else {}
        if isinstance(detail.get("interrupt_id"), str):
            covered_interrupts.add(detail["interrupt_id"])
        if isinstance(detail.get("checkpoint"), int):
            covered_checkpoints.add(detail["checkpoint"])

    entries = [_event(e, by_interrupt, accepted) for e in events]
    entries += [_checkpoint(c, owners) for c in checkpoints if c.seq not in covered_checkpoints]
    entries += [_effect(e, owners) for e in effects]
    for interrupt in by_interrupt.values():
        if interrupt.id not in covered_interrupts:
            entries += _interrupt(interrupt)
    entries += [
        _attempt(a)
        for a in attempts
        if a.outcome != "accepted" or a.interrupt_id not in covered_interrupts
    ]
    return sorted(entries, key=lambda e: (aware(e.at), _RANK[e.source]))


def _event(
    event: EventView,
    interrupts: dict[str, InterruptView],
    accepted: dict[str | None, ResumeAttemptView],
) -> Entry:
    what = event.trigger
    if event.to_state is not None:
        what += f" {event.from_state or '∅'} → {event.to_state}"
    detail: Any = event.detail
    if isinstance(detail, dict) and "traceback" in detail:
        # Many lines: ``runs show --traceback`` prints it under the timeline.
        detail = {key: value for key, value in detail.items() if key != "traceback"}
    interrupt = None
    if isinstance(detail, dict) and isinstance(detail.get("interrupt_id"), str):
        interrupt = interrupts.get(detail["interrupt_id"])
    text = compact(detail, FULL) if detail else ""
    if interrupt is not None and event.trigger == "interrupt":
        text = _asks(interrupt)
    elif interrupt is not None and event.trigger == "accept_resume":
        attempt = accepted.get(interrupt.id)
        text = f"{interrupt.kind} {interrupt.name!r} {interrupt.id}: {interrupt.decision or '?'}"
        if interrupt.resume_input:
            text += f", input {compact(interrupt.resume_input, FULL)}"
        if attempt is not None:
            text += f" (attempt {attempt.id})"
    return Entry(
        at=event.at,
        what=what,
        actor=actor_label(event.actor),
        detail=text,
        source="event",
        ref=str(event.id),
    )


def _asks(interrupt: InterruptView) -> str:
    return (
        f"{interrupt.kind} {interrupt.name!r} {interrupt.id}: {interrupt.reason or '-'}; "
        f"roles {', '.join(interrupt.roles)}; deadline {timestamp(interrupt.deadline)}; "
        f"now {interrupt.status}"
    )


def _worker(epoch: int, owners: dict[Any, str]) -> str:
    return actor_label(owners.get(epoch)) if epoch in owners else f"worker:epoch-{epoch}"


def _checkpoint(checkpoint: CheckpointView, owners: dict[Any, str]) -> Entry:
    after = f"after step {checkpoint.step}" if checkpoint.step else "initial"
    detail = f"{after}, next {checkpoint.next_step or 'end'}, epoch {checkpoint.epoch}"
    if checkpoint.effects:
        detail += f", {len(checkpoint.effects)} effect(s)"
    if checkpoint.budget_consumed:
        detail += f", budget used {checkpoint.budget_consumed:g}"
    return Entry(
        at=checkpoint.created_at,
        what=f"checkpoint #{checkpoint.seq}",
        actor=_worker(checkpoint.epoch, owners),
        detail=detail,
        source="checkpoint",
        ref=checkpoint.id,
    )


def _effect(effect: EffectView, owners: dict[Any, str]) -> Entry:
    detail = f"{effect.name!r} in step {effect.step}, key {effect.idempotency_key}"
    detail += f", epoch {effect.epoch}"
    if effect.receipt is not None:
        detail += f", receipt {compact(effect.receipt, FULL)}"
    if effect.error:
        detail += f", error {effect.error}"
    return Entry(
        at=effect.created_at,
        what=f"effect {effect.status}",
        actor=_worker(effect.epoch, owners),
        detail=detail,
        source="effect",
        ref=str(effect.id),
    )


def _interrupt(interrupt: InterruptView) -> list[Entry]:
    """An interrupt no event mentions (older records): opened, and closed if it was."""
    opened = Entry(
        at=interrupt.created_at,
        what=f"interrupt {interrupt.kind}",
        actor="-",
        detail=_asks(interrupt),
        source="interrupt",
        ref=interrupt.id,
    )
    if interrupt.resolved_at is None:
        return [opened]
    closed = f"{interrupt.decision or interrupt.status}"
    if interrupt.resume_input:
        closed += f", input {compact(interrupt.resume_input, FULL)}"
    if interrupt.superseded_by:
        closed += f", superseded by {interrupt.superseded_by}"
    return [
        opened,
        Entry(
            at=interrupt.resolved_at,
            what=f"interrupt {interrupt.status}",
            actor=actor_label(interrupt.resolved_by),
            detail=f"{interrupt.name!r} {interrupt.id}: {closed}",
            source="interrupt",
            ref=interrupt.id,
        ),
    ]


def attempt_actor(attempt: ResumeAttemptView) -> str:
    """Who submitted an attempt, as ``kind:id`` (``?`` when the contract named nobody)."""
    actor = attempt.actor_id
    payload = attempt.payload if isinstance(attempt.payload, dict) else {}
    given = payload.get("actor")
    if isinstance(given, dict) and isinstance(given.get("type"), str) and actor:
        actor = f"{given['type']}:{actor}"
    return actor_label(actor) if actor else "?"


def _attempt(attempt: ResumeAttemptView) -> Entry:
    return Entry(
        at=attempt.at,
        what=f"resume {attempt.outcome}",
        actor=attempt_actor(attempt),
        detail=f"attempt {attempt.id}: {attempt.reason}",
        source="resume_attempt",
        ref=str(attempt.id),
    )
