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
    "ContactChannel",
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


class ContactChannel(StrEnum):
    """Where an actor is reached (``actor_contacts``): the notifiers that carry answer links."""

    EMAIL = "email"
    SLACK = "slack"


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


class NotificationStatus(StrEnum):
    """Where one notifier's notification about one interrupt stands (the outbox's rows)."""

    OWED = "owed"
    NOTIFIED = "notified"
    # The interrupt was closed before the notifier was called: nobody is asked to answer it.
    SKIPPED = "skipped"
    FAILED = "failed"


class EventKind(StrEnum):
    """What an audit event records: a run transition (named by its trigger) or another fact.

    Each member's docstring is its entry in the generated reference (docs/reference/event-kinds.md).
    """

    # Run transitions (the triggers of statemachine.lifecycle).
    CLAIM = "claim"
    """A worker took the run to execute its next step, under a new lease and fencing epoch."""
    ADVANCE = "advance"
    """A step committed and named the next step; the run is queued for it."""
    RETRY = "retry"
    """A step failed and another attempt is due after its backoff."""
    REQUEUE = "requeue"
    """The worker's lease was lost (expired, or its pool child died); the reaper or the worker's
    main process queued the run again."""
    SUSPEND = "suspend"
    """A step asked an interrupt that has no answer yet; the run waits."""
    ACCEPT_RESUME = "accept_resume"
    """The gateway accepted an answer (or the expiry sweep applied a declared default)."""
    EXPIRE = "expire"
    """An interrupt's deadline passed and its policy expired the run."""
    COMPLETE = "complete"
    """The last step committed; the run succeeded."""
    FAIL = "fail"
    """The run failed for good (its retries ran out, a definition error, lost leases)."""
    CANCEL = "cancel"
    """An operator or an expiry policy cancelled the run; its pending interrupts are closed."""
    RESTART = "restart"
    """An operator retried a failed run; it continues from its last checkpoint."""
    # Facts that are not transitions.
    ENQUEUE = "enqueue"
    """The run was started (flow and version)."""
    INTERRUPT = "interrupt"
    """An interrupt was recorded: what it asks, of whom, with which evidence and deadline."""
    INTERRUPT_EXPIRED = "interrupt_expired"
    """The sweep closed an interrupt its run no longer waited on."""
    ESCALATE = "escalate"
    """An interrupt's deadline passed and a new one for the escalation roles superseded it."""
    REVIEW_RENEWED = "review_renewed"
    """The evidence changed: a new interrupt with the current evidence superseded the
    answered one (the old input is kept on it)."""
    ASK_ANSWERED = "ask_answered"
    """One ask of a group was answered while the group's need is not met yet: the run waits on."""
    GROUP_CLOSED = "group_closed"
    """The group's need was met: the asks still open were closed (superseded)."""
    EVENT_DELIVERED = "event_delivered"
    """An event answered the run's wait for it: sent while it waited, or kept until it asked."""
    FORKED = "forked"
    """An operator started a new run from one of this run's checkpoints."""
    PAUSE_REQUESTED = "pause_requested"
    """An operator asked the run to stop at its next step boundary."""
    MIGRATE = "migrate"
    """The run continued on a newer flow version through its declared migration."""
    ANSWER_CARRIED = "answer_carried"
    """An answer given on the old version was carried over to the new one after a migration."""
    REFUSED = "refused"
    """A worker refused to execute the run (no loaded flow version can continue it); recorded
    once per reason."""
    OPERATOR_REFUSED = "operator_refused"
    """A cancel, pause or retry refused: its credential did not authenticate, or the actor
    holds none of the flow's operator roles. The run is otherwise untouched."""
    REPUBLISH = "republish"
    """The reaper published the run's task again (unclaimed for too long: a lost publish)."""
    NOTIFY_FAILED = "notify_failed"
    """A notifier was not told of an interrupt: its calls failed (or its tasks were lost) as
    many times as `INTERLUDE_NOTIFY_RETRIES` allows; the last error is kept."""
    # Repeated work (counted by stats): one event per re-execution, counters carry {"count": n}.
    STEP_REEXECUTED = "step_reexecuted"
    """A step executed again (after a resume, a redelivery or a lost lease)."""
    EFFECT_SKIPPED = "effect_skipped"
    """A step that ran again found an effect applied and reused its receipt."""
    EFFECT_RECONCILED = "effect_reconciled"
    """An effect whose outcome was unknown was settled by its reconciler."""
    REPAIR_RAISED = "repair_raised"
    """An effect whose outcome nobody could tell was handed to an operator as a `repair`."""


REPEATED_WORK = (
    EventKind.STEP_REEXECUTED,
    EventKind.EFFECT_SKIPPED,
    EventKind.EFFECT_RECONCILED,
    EventKind.REPAIR_RAISED,
)
