"""The one status vocabulary shared by the state machine, the tables and the CLI."""

from __future__ import annotations

from enum import StrEnum


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.EXPIRED, RunState.CANCELLED}
)


class InterruptKind(StrEnum):
    APPROVAL = "approval"
    EVIDENCE = "evidence"
    EVENT = "event"
    REPAIR = "repair"
    BUDGET = "budget"
    OPERATOR = "operator"


class InterruptStatus(StrEnum):
    PENDING = "pending"
    RESOLVED = "resolved"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


class ExpiryPolicy(StrEnum):
    EXPIRE = "expire"
    CANCEL = "cancel"
    ESCALATE = "escalate"
    DEFAULT = "default"


class Decision(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"


class ResumeOutcome(StrEnum):
    ACCEPTED = "accepted"
    DUPLICATE = "duplicate"
    MALFORMED = "malformed"
    UNAUTHENTICATED = "unauthenticated"
    STALE = "stale"
    EXPIRED = "expired"
    DENIED = "denied"
    INVALID_INPUT = "invalid_input"
    RENEWED_REVIEW_REQUIRED = "renewed_review_required"


class EffectStatus(StrEnum):
    INTENT = "intent"
    APPLIED = "applied"
    FAILED = "failed"
