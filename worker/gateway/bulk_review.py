"""Bulk review: several open interrupts of one kind answered together, each on its own.

Each interrupt gets its own ``resume.v1`` contract, bound to the checkpoint, scope and
evidence the responder was shown of *that* interrupt, and goes through the gateway alone: one
that changed or was answered meanwhile is refused (stale, renewed review) without touching
the others, and every attempt is recorded. The idempotency keys are the batch's, so that a
confirm sent twice answers each interrupt once (the second is a duplicate).
"""

from __future__ import annotations

import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from models.contracts import InterruptView, ResumeResult, contract_payload
from models.enums import Decision, InterruptStatus
from models.errors import InvalidInputError
from worker.gateway.submit import submit_resume
from worker.interrupts import get_interrupt

# One review at a time: enough for a morning's queue, few enough to read every evidence.
MAX_BATCH = 200
CONTRACT_LIFETIME = timedelta(minutes=30)


@dataclass(frozen=True)
class Shown:
    """What the responder was shown of one interrupt: what its answer binds to."""

    interrupt_id: str
    run_id: str
    checkpoint_id: str
    kind: str
    scope: Any
    evidence_hash: str
    policy_version: str | None = None
    # The input an approval without one starts from (the interrupt's default, or the input
    # given before a renewed review).
    default_input: dict[str, Any] | None = None

    @property
    def id(self) -> str:
        return self.interrupt_id

    @property
    def previous_input(self) -> dict[str, Any] | None:
        return None  # (folded into default_input)

    @classmethod
    def of(cls, interrupt: InterruptView) -> Shown:
        return cls(
            interrupt_id=interrupt.id,
            run_id=interrupt.run_id,
            checkpoint_id=interrupt.checkpoint_id,
            kind=interrupt.kind,
            scope=interrupt.scope,
            evidence_hash=interrupt.evidence_hash,
            policy_version=interrupt.policy_version,
            default_input=interrupt.previous_input or interrupt.default_input,
        )


def new_batch() -> str:
    return secrets.token_hex(8)


def select_for_review(interrupt_ids: Iterable[str]) -> list[InterruptView]:
    """The interrupts to review together: pending, all of one kind, at most MAX_BATCH;
    InvalidInputError (nothing submitted) otherwise."""
    ids = list(dict.fromkeys(interrupt_ids))
    if not ids:
        raise InvalidInputError(detail="select at least one interrupt")
    if len(ids) > MAX_BATCH:
        raise InvalidInputError(detail=f"at most {MAX_BATCH} interrupts are reviewed together")
    found = [get_interrupt(i) for i in ids]
    _one_kind(i.kind for i in found)
    closed = [i.id for i in found if i.status != InterruptStatus.PENDING.value]
    if closed:
        raise InvalidInputError(detail=f"not open any more: {', '.join(closed)}")
    return found


def _one_kind(kinds: Iterable[str]) -> str:
    distinct = sorted(set(kinds))
    if len(distinct) != 1:
        raise InvalidInputError(
            detail=f"interrupts reviewed together are of one kind; these are {', '.join(distinct)}"
        )
    return distinct[0]


def answer_together(
    shown: Sequence[Shown],
    *,
    actor: str,
    credential: str,
    decision: str,
    input: dict[str, Any] | None = None,
    actor_type: str = "human",
    batch: str | None = None,
) -> list[ResumeResult]:
    """Answer each interrupt ``shown`` with ``decision``: one contract and one gateway
    submission each, in order; the results in the same order. ``input`` applies to each
    (None: each approval starts from its own default input; a rejection carries none).

    Refused before anything is submitted (InvalidInputError) when the interrupts are not of
    one kind or are too many.
    """
    if not shown:
        raise InvalidInputError(detail="select at least one interrupt")
    if len(shown) > MAX_BATCH:
        raise InvalidInputError(detail=f"at most {MAX_BATCH} interrupts are reviewed together")
    _one_kind(s.kind for s in shown)
    batch = batch or new_batch()
    return [
        submit_resume(
            _contract(item, actor, actor_type, decision, input, batch),
            credential,
        )
        for item in shown
    ]


def _contract(
    item: Shown,
    actor: str,
    actor_type: str,
    decision: str,
    input: dict[str, Any] | None,
    batch: str,
) -> dict[str, Any]:
    if input is None:
        input = (item.default_input or {}) if decision == Decision.APPROVED.value else {}
    return contract_payload(
        item,
        actor=actor,
        actor_type=actor_type,
        decision=decision,
        input=input,
        idempotency_key=f"bulk-{batch}-{item.interrupt_id}"[:200],
        expires_in=CONTRACT_LIFETIME,
    )
