"""Values that cross a boundary: the resume contract and the frozen read models."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, computed_field, field_validator
from pydantic_core import PydanticCustomError

from models import json_codec
from models.canonical import EVIDENCE_CANON
from models.enums import Decision, ResumeOutcome

RESUME_SCHEMA_VERSION = "resume.v1"
# How long a contract built for a responder stays valid, unless they say otherwise.
CONTRACT_EXPIRES_IN = timedelta(minutes=15)


# The input schema of a tool-call review is named after its arguments' model:
# ``<args>-review.vN`` (``worker.flows.toolcalls.answer_model``).
REVIEW_SCHEMA_SUFFIX = "-review"


def json_copy(value: Any) -> Any:
    """``value`` as it will be stored and read back: JSON with finite numbers only.

    The one check for every value interlude stores (run input, flow state, receipts,
    evidence, resume input); raises TypeError or ValueError for anything else.
    """
    return json_codec.loads(json_codec.dumps(value, allow_nan=False))


class Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ActorRef(Frozen):
    type: Literal["human", "service"]
    id: str = Field(min_length=1, max_length=200)


class ResumeContract(Frozen):
    """``resume.v1``: what a responder submits to release exactly one interrupt."""

    schema_version: Literal["resume.v1"]
    run_id: str = Field(min_length=1, max_length=200)
    checkpoint_id: str = Field(min_length=1, max_length=200)
    interrupt_id: str = Field(min_length=1, max_length=200)
    actor: ActorRef
    decision: Decision
    input: dict[str, Any] = Field(default_factory=dict)
    scope: Any = None
    evidence_hash: str = Field(min_length=1, max_length=200)
    idempotency_key: str = Field(min_length=1, max_length=200)
    expires_at: datetime = Field(
        description="until when this contract may be submitted: an RFC 3339 date-time with its "
        "timezone (2026-12-03T14:00:00Z, 2026-12-03T15:00:00+01:00)"
    )
    policy_version: str | None = None

    @field_validator("expires_at")
    @classmethod
    def _with_timezone(cls, value: datetime) -> datetime:
        # Read as UTC, a local time would make the contract valid hours longer or shorter.
        if value.utcoffset() is None:
            raise PydanticCustomError(
                "timezone_aware",
                "needs a timezone, e.g. 2026-12-03T14:00:00Z or 2026-12-03T15:00:00+01:00",
            )
        return value

    @classmethod
    def for_interrupt(
        cls,
        interrupt: InterruptView,
        *,
        actor: str,
        actor_type: str = "human",
        decision: str = "approved",
        input: Any = None,
        idempotency_key: str | None = None,
        expires_in: timedelta | float = CONTRACT_EXPIRES_IN,
    ) -> ResumeContract:
        """The contract releasing ``interrupt``, bound to the checkpoint, scope and evidence it
        shows; raises pydantic's ``ValidationError`` if an argument makes it malformed."""
        return cls.model_validate(
            contract_payload(
                interrupt,
                actor=actor,
                actor_type=actor_type,
                decision=decision,
                input=input,
                idempotency_key=idempotency_key,
                expires_in=expires_in,
            )
        )


class Bindable(Protocol):
    """What a contract binds to of an interrupt (an ``InterruptView``, or what a responder
    was shown of one)."""

    @property
    def id(self) -> str: ...
    @property
    def run_id(self) -> str: ...
    @property
    def checkpoint_id(self) -> str: ...
    @property
    def scope(self) -> Any: ...
    @property
    def evidence_hash(self) -> str: ...
    @property
    def policy_version(self) -> str | None: ...
    @property
    def previous_input(self) -> dict[str, Any] | None: ...
    @property
    def default_input(self) -> dict[str, Any] | None: ...


def contract_payload(
    interrupt: Bindable,
    *,
    actor: str,
    actor_type: str = "human",
    decision: str = "approved",
    input: Any = None,
    idempotency_key: str | None = None,
    expires_in: timedelta | float = CONTRACT_EXPIRES_IN,
) -> dict[str, Any]:
    """``ResumeContract.for_interrupt`` as the JSON a responder submits, not validated here.

    For callers that must hand even a malformed contract to the gateway (which refuses and
    records it), such as the CLI. ``input=None`` starts from the input given before a renewed
    review, else the interrupt's default input, else ``{}``.
    """
    if input is None:
        input = interrupt.previous_input or interrupt.default_input or {}
    if not isinstance(expires_in, timedelta):
        expires_in = timedelta(seconds=expires_in)
    return {
        "schema_version": RESUME_SCHEMA_VERSION,
        "run_id": interrupt.run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": actor_type, "id": actor},
        "decision": decision,
        "input": input,
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "idempotency_key": idempotency_key or uuid.uuid4().hex,
        "expires_at": (datetime.now(UTC) + expires_in).isoformat(),
        # The policy the responder answers under (absent when the flow declares none).
        **({"policy_version": interrupt.policy_version} if interrupt.policy_version else {}),
    }


class ResumeResult(Frozen):
    outcome: ResumeOutcome
    reason: str
    attempt_id: int
    run_id: str | None = None
    interrupt_id: str | None = None
    # For a duplicate: the outcome of the first attempt with the same idempotency key.
    original_outcome: ResumeOutcome | None = None
    # For renewed review: the interrupt that now waits in place of the old one.
    new_interrupt_id: str | None = None

    @property
    def accepted(self) -> bool:
        return self.outcome is ResumeOutcome.ACCEPTED


class InterruptFields(Frozen):
    """What a flow declares about an interrupt: shared by the declaration and the view."""

    name: str
    kind: str
    reason: str
    schema_name: str
    schema_version: int
    json_schema: dict[str, Any]
    roles: list[str]
    scope: Any
    evidence: Any
    evidence_hash: str
    evidence_canon: str | None = EVIDENCE_CANON
    policy_version: str | None = None
    ask_group: str | None = None
    group_need: int | None = None
    trace_parent: str | None = None
    separate_from_starter: bool
    on_expiry: str
    escalation: dict[str, Any] | None
    default_input: dict[str, Any] | None


class ProposedCall(Frozen):
    """The tool call a review interrupt asks about (``ctx.review_call``), as proposed."""

    tool: str
    args: dict[str, Any]


def proposed_call(schema_name: str, evidence: Any) -> ProposedCall | None:
    """The call an interrupt reviews, read from what it records; None for any other interrupt.

    Read from the interrupt alone (its input schema's name and its evidence), so that a
    process without the flow's code (the CLI, a web server for many flows) shows the call too.
    """
    if not schema_name.endswith(REVIEW_SCHEMA_SUFFIX) or not isinstance(evidence, dict):
        return None
    tool, args = evidence.get("tool"), evidence.get("args")
    if not isinstance(tool, str) or not isinstance(args, dict):
        return None
    return ProposedCall(tool=tool, args=args)


class InterruptDecl(InterruptFields):
    """A checked interrupt declaration (built by ``ctx.interrupt``), ready to be stored."""

    expires_in: float
    # A renewed review on a newer flow version: the answer it asks again, and that answer.
    supersedes: str | None = None
    previous_input: dict[str, Any] | None = None


class InterruptView(InterruptFields):
    """A stored interrupt, as people and code read it."""

    @computed_field  # type: ignore[prop-decorator]
    @property
    def review(self) -> ProposedCall | None:
        """For a tool-call review: the call proposed (approve it, edit its ``args``, or reject
        it with a ``message``); null for any other interrupt."""
        return proposed_call(self.schema_name, self.evidence)

    id: str
    run_id: str
    status: str
    step: str
    checkpoint_id: str
    state_version: int
    flow_version: int
    deadline: datetime
    escalation_level: int
    supersedes: str | None
    superseded_by: str | None
    previous_input: dict[str, Any] | None
    decision: str | None
    resume_input: dict[str, Any] | None
    resolved_by: str | None
    created_at: datetime
    resolved_at: datetime | None

    @property
    def schema_id(self) -> str:
        return f"{self.schema_name}.v{self.schema_version}"


class AskGroupView(Frozen):
    """An ask group at the run's checkpoint: which asks are answered, which open, what is
    still needed to release the run."""

    group: str
    need: int
    answered: list[str]
    open: list[str]
    closed: list[str]
    still_needed: int


class KeptEventView(Frozen):
    """An event kept in a run's mailbox until the run asks for it."""

    name: str
    sender: str
    arrived_at: datetime
    payload: Any


class RunView(Frozen):
    id: str
    flow_name: str
    flow_version: int
    state: str
    state_version: int
    input: Any
    flow_state: Any
    next_step: str | None
    output: Any
    error: str | None
    started_by: str | None
    budget_allowance: float | None
    budget_consumed: float
    pause_requested_by: str | None
    checkpoints: int
    checkpoint_id: str
    pending_interrupts: list[InterruptView]
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    ask_groups: list[AskGroupView] = []
    kept_events: list[KeptEventView] = []
    # A fork's origin (and the checkpoint it started at), and the forks of this run.
    forked_from: str | None = None
    forked_at: int | None = None
    forks: list[str] = []


class RunSummary(Frozen):
    id: str
    flow_name: str
    flow_version: int
    state: str
    next_step: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class ResumeAttemptView(Frozen):
    id: int
    at: datetime
    run_id: str | None
    interrupt_id: str | None
    actor_id: str | None
    idempotency_key: str | None
    outcome: str
    reason: str
    payload: Any
    # The answer link or chat callback it came through (None: the actor's credential).
    via: str | None = None


class CheckpointView(Frozen):
    id: str
    seq: int
    step: str | None
    next_step: str | None
    state: Any
    budget_consumed: float
    effects: list[str]
    epoch: int
    created_at: datetime


class EventView(Frozen):
    id: int
    at: datetime
    actor: str
    trigger: str
    from_state: str | None
    to_state: str | None
    detail: Any


class EffectView(Frozen):
    id: int
    run_id: str
    step: str
    name: str
    idempotency_key: str
    epoch: int
    request_hash: str
    status: str
    receipt: Any
    error: str | None
    created_at: datetime
    updated_at: datetime


class NotificationView(Frozen):
    """One notifier's notification about one interrupt, from the outbox: ``owed`` until its
    task marks it ``notified``, ``skipped`` (the interrupt closed first) or ``failed``."""

    interrupt_id: str
    notifier: str
    status: str
    attempt: int
    due_at: datetime
    error: str | None
    created_at: datetime
    done_at: datetime | None


class ActorView(Frozen):
    id: str
    kind: str  # human or service, fixed when the actor was added
    roles: list[str]
    created_at: datetime
    revoked_at: datetime | None
