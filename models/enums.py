"""The one status vocabulary shared by the state machine, the tables and the CLI.

Run and interrupt states belong to their lifecycles in ``statemachine``; they are re-exported
here so that the rest of interlude has one place to import its vocabulary from.
"""

from __future__ import annotations

from enum import StrEnum

from statemachine import TERMINAL_STATES, InterruptStatus, RunState

__all__ = [
    "TERMINAL_STATES",
    "ActorKind",
    "Decision",
    "EffectStatus",
    "EventKind",
    "ExpiryPolicy",
    "InterruptKind",
    "InterruptStatus",
    "ResumeOutcome",
    "RunState",
]


class InterruptKind(StrEnum):
    APPROVAL = "approval"
    EVIDENCE = "evidence"
    EVENT = "event"
    REPAIR = "repair"
    BUDGET = "budget"
    OPERATOR = "operator"


class ExpiryPolicy(StrEnum):
    EXPIRE = "expire"
    CANCEL = "cancel"
    ESCALATE = "escalate"
    DEFAULT = "default"


class Decision(StrEnum):
    APPROVED = "approved"
    REJECTED = "rejected"


class ActorKind(StrEnum):
    """What an actor is, fixed when it is added: a resume or an operator action made with its
    credential records it as ``human:ID`` or ``service:ID`` and may claim no other kind."""

    HUMAN = "human"
    SERVICE = "service"


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
    # The interrupt's input schema is registered by no flow loaded in this process.
    UNKNOWN_SCHEMA = "unknown_schema"
    # The actor's idempotency key was used before with another payload.
    KEY_REUSED = "key_reused"
    # An event received for a run not waiting on it yet: kept in the run's mailbox, it answers
    # the run's ask for it when the run asks.
    KEPT = "kept"


class EffectStatus(StrEnum):
    INTENT = "intent"
    APPLIED = "applied"
    FAILED = "failed"


class EventKind(StrEnum):
    """What an audit event records: a run transition (named by its trigger) or another fact."""

    # Run transitions (the triggers of statemachine.lifecycle).
    CLAIM = "claim"
    ADVANCE = "advance"
    RETRY = "retry"
    REQUEUE = "requeue"
    SUSPEND = "suspend"
    ACCEPT_RESUME = "accept_resume"
    EXPIRE = "expire"
    COMPLETE = "complete"
    FAIL = "fail"
    CANCEL = "cancel"
    RESTART = "restart"
    # Facts that are not transitions.
    ENQUEUE = "enqueue"
    INTERRUPT = "interrupt"
    INTERRUPT_EXPIRED = "interrupt_expired"
    ESCALATE = "escalate"
    REVIEW_RENEWED = "review_renewed"
    # One ask of a group answered while the group's need is not met yet: the run waits on.
    ASK_ANSWERED = "ask_answered"
    # The group's need was met: the asks still open were closed (superseded).
    GROUP_CLOSED = "group_closed"
    # An event answered the run's wait for it: sent while it waited, or kept until it asked.
    EVENT_DELIVERED = "event_delivered"
    # An operator started a new run from one of this run's checkpoints.
    FORKED = "forked"
    PAUSE_REQUESTED = "pause_requested"
    MIGRATE = "migrate"
    ANSWER_CARRIED = "answer_carried"
    REFUSED = "refused"
    # A cancel, pause or retry refused: its credential did not authenticate, or the actor
    # holds none of the flow's operator roles. The run is otherwise untouched.
    OPERATOR_REFUSED = "operator_refused"
    # The reaper published a run's task again (unclaimed for too long: a lost publish).
    REPUBLISH = "republish"
    # Repeated work (counted by stats): one event per re-execution, counters carry {"count": n}.
    STEP_REEXECUTED = "step_reexecuted"
    EFFECT_SKIPPED = "effect_skipped"
    EFFECT_RECONCILED = "effect_reconciled"
    REPAIR_RAISED = "repair_raised"


REPEATED_WORK = (
    EventKind.STEP_REEXECUTED,
    EventKind.EFFECT_SKIPPED,
    EventKind.EFFECT_RECONCILED,
    EventKind.REPAIR_RAISED,
)
