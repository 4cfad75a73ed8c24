"""The resume gateway's checks 4 to 8, against the checkpoint: the binding (run, checkpoint,
interrupt, evidence, scope, policy version), the deadlines, the actor's roles and separation of
duties, the input against the interrupt's schema, and the flow's revalidation.

A failed check raises ``Refusal`` with its outcome before anything is written; the order of the
checks (``worker.gateway.submit``) decides which refusal an attempt gets.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError
from sqlalchemy.orm import Session

from models import checkpoints as checkpoint_store
from models import events as event_store
from models import interrupts as interrupt_store
from models.canonical import EVIDENCE_CANON, evidence_hash, same_json
from models.contracts import ResumeContract, json_copy
from models.db import utcnow
from models.enums import Decision, EventKind, InterruptStatus, ResumeOutcome, RunState
from models.errors import InterludeError
from models.identity import normal_actor_id
from models.tables import Actor, Interrupt, Run
from worker.flows.flow import Flow, Migration, RevalidationContext, continuation, load_flow_modules
from worker.flows.schemas import describe_errors, json_schema_of, lookup
from worker.gateway.review_checks import edit_refusal, policy_renewal
from worker.interrupts import view

RENEWED_REASON = "evidence changed while the run waited; a new review is required"
RENEWED_POLICY_REASON = (
    "the flow's approval policy changed while the run waited, and answers given under the "
    "old one are not honoured; a new review is required"
)


class Refusal(Exception):
    """Control flow inside the gateway: a check failed with ``outcome``; nothing was written."""

    def __init__(self, outcome: ResumeOutcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class Undecided(Refusal):
    """A refusal that says nothing of the answer: this process's code cannot check it now (the
    interrupt's schema is missing or changed here, or the flow's revalidation failed).

    A person's resume is refused as any other; the system's answer waits (``SystemDeferred``).
    """


def check_answer(
    session: Session, contract: ResumeContract, actor: Actor
) -> tuple[Interrupt, Run, Flow | None, dict[str, Any], Interrupt | None]:
    """Checks 4 to 8; returns what acceptance needs, or a renewed interrupt, or raises Refusal."""
    # Concurrent resumes of one interrupt queue here (SQLite already serialises writers).
    found = interrupt_store.lock_with_run(session, contract.interrupt_id)
    if found is None:
        raise Refusal(ResumeOutcome.STALE, f"no interrupt {contract.interrupt_id}")
    interrupt, run = found
    submitted, code = checked_answer(contract, actor, interrupt, run)
    new_interrupt = None
    if code is not None:
        new_interrupt = revalidate(session, *code, interrupt, run, submitted)
    return interrupt, run, code[0] if code else None, submitted, new_interrupt


def checked_answer(
    contract: ResumeContract, actor: Actor, interrupt: Interrupt, run: Run
) -> tuple[dict[str, Any], tuple[Flow, Migration | None] | None]:
    """Checks 4 to 7, which read nothing more than the interrupt and its run; the input as it
    is stored, and the flow's code that check 8 runs here (None: the worker runs it)."""
    check_binding(contract, interrupt, run)
    now = utcnow()
    if interrupt.deadline <= now:
        raise Refusal(
            ResumeOutcome.EXPIRED,
            f"the interrupt's deadline passed at {interrupt.deadline.isoformat()}",
        )
    # (The contract's model refused an expires_at without a timezone: check 1, malformed.)
    expires_at = contract.expires_at
    if expires_at <= now:
        raise Refusal(ResumeOutcome.EXPIRED, f"the contract expired at {expires_at.isoformat()}")
    roles = set(actor.roles or [])
    if not roles & set(interrupt.roles or []):
        raise Refusal(
            ResumeOutcome.DENIED,
            f"actor {actor.id} holds none of the roles {sorted(interrupt.roles)}",
        )
    _separate_from_starter(interrupt, run, actor)
    submitted = submitted_input(validate_input(contract, interrupt))
    code = flow_for(run)
    if contract.decision is Decision.APPROVED:
        refused = edit_refusal(interrupt, submitted, roles, code[0] if code else None)
        if refused is not None:
            raise Refusal(ResumeOutcome.DENIED, f"actor {actor.id}: {refused}")
    return submitted, code


def _separate_from_starter(interrupt: Interrupt, run: Run, actor: Actor) -> None:
    """Separation of duties fails closed: with no recorded starter, nobody may release it."""
    if not interrupt.separate_from_starter:
        return
    if run.started_by is None:
        raise Refusal(
            ResumeOutcome.DENIED,
            "the run has no recorded starter, so separation from the starter cannot be checked",
        )
    if normal_actor_id(run.started_by) == actor.id:
        raise Refusal(
            ResumeOutcome.DENIED, f"actor {actor.id} started this run and may not release it"
        )


def submitted_input(validated: BaseModel | None) -> dict[str, Any]:
    """The validated input as it is stored: JSON with finite numbers only."""
    if validated is None:
        return {}
    try:
        checked: dict[str, Any] = json_copy(validated.model_dump(mode="json"))
    except ValueError:
        # A float field accepts "inf", "Infinity" and "1e309"; no budget or record may hold it.
        raise Refusal(
            ResumeOutcome.INVALID_INPUT, "input holds a number that is not finite"
        ) from None
    return checked


def check_binding(contract: ResumeContract, interrupt: Interrupt, run: Run) -> None:
    problems = []
    if interrupt.status != InterruptStatus.PENDING.value:
        problems.append(f"interrupt is {interrupt.status}")
    if contract.run_id != interrupt.run_id:
        problems.append("run does not match the interrupt")
    if contract.checkpoint_id != interrupt.checkpoint_id:
        problems.append(f"checkpoint {contract.checkpoint_id} is not the interrupt's checkpoint")
    if run.state != RunState.WAITING.value or run.state_version != interrupt.state_version:
        problems.append(f"run moved on (now {run.state}, version {run.state_version})")
    if contract.evidence_hash != interrupt.evidence_hash:
        problems.append("evidence hash differs from the evidence on record")
    if not same_json(contract.scope, interrupt.scope):
        problems.append("scope differs from the interrupt's scope")
    if contract.policy_version is not None and contract.policy_version != interrupt.policy_version:
        problems.append(
            f"policy version {contract.policy_version!r} is not the interrupt's "
            f"({interrupt.policy_version!r})"
        )
    if problems:
        raise Refusal(ResumeOutcome.STALE, "; ".join(problems))


def flow_for(run: Run) -> tuple[Flow, Migration | None] | None:
    """The flow code that revalidates a resume of ``run`` here, if this process has any.

    The run's own version, else the newest version declaring a migration from it (its
    revalidation then sees the migrated state). Input validation never needs either.
    """
    try:
        return continuation(run.flow_name, run.flow_version, run_id=run.id)
    except InterludeError:
        return None


def validate_input(contract: ResumeContract, interrupt: Interrupt) -> BaseModel | None:
    """Check 7, against the schema recorded on the interrupt, wherever it is registered here."""
    # Schemas are registered by the flow modules: any loaded version of any flow may hold it.
    load_flow_modules()
    model = lookup(interrupt.schema_name, interrupt.schema_version)
    schema = f"{interrupt.schema_name}.v{interrupt.schema_version}"
    if model is None:
        raise Undecided(
            ResumeOutcome.UNKNOWN_SCHEMA,
            f"input schema {schema} is registered by none of the flows loaded here "
            "(INTERLUDE_FLOWS); nothing changed",
        )
    if json_schema_of(model) != interrupt.json_schema:
        # The model changed under the same version: the responder saw another form.
        raise Undecided(
            ResumeOutcome.INVALID_INPUT,
            f"input schema {schema} changed since the interrupt was raised",
        )
    if contract.decision is Decision.REJECTED and not contract.input:
        return None
    try:
        return model.model_validate(contract.input)
    except ValidationError as exc:
        raise Refusal(ResumeOutcome.INVALID_INPUT, f"{schema}: {describe_errors(exc)}") from None


def revalidate(
    session: Session,
    flow: Flow,
    migration: Migration | None,
    interrupt: Interrupt,
    run: Run,
    submitted: dict[str, Any],
) -> Interrupt | None:
    """Check 8: recompute the evidence; if it changed, supersede the interrupt, keep the input.

    With a migration, the newer version revalidates against the state migrated in memory
    (the run itself migrates when a worker continues it).
    """
    renewed_policy = policy_renewal(flow, interrupt)
    if renewed_policy is not None:
        # Answers under a policy the flow no longer honours are not applied: asked again
        # under the current one, the input kept (the evidence is revalidated when answered).
        return _renew(
            session,
            interrupt,
            run,
            submitted,
            {"policy_version": renewed_policy.version},
            {"answered_policy": interrupt.policy_version, "policy": renewed_policy.version},
        )
    revalidator = flow.revalidators.get(interrupt.name)
    if revalidator is None:
        return None
    checkpoint = checkpoint_store.get_checkpoint(session, interrupt.checkpoint_id)
    state = dict(checkpoint.state or {}) if checkpoint is not None else {}
    try:
        if migration is not None:
            state = migration(state)
        context = RevalidationContext(
            run_id=run.id, input=run.input, state=state, interrupt=view(interrupt)
        )
        current = json_copy(revalidator(context))
        # Compared the way the interrupt's own hash was computed (it may predate RFC 8785).
        unchanged = evidence_hash(current, interrupt.evidence_canon) == interrupt.evidence_hash
        current_hash = evidence_hash(current)
    except Exception as exc:
        raise Undecided(
            ResumeOutcome.RENEWED_REVIEW_REQUIRED,
            f"business revalidation failed ({type(exc).__name__}: {exc}); nothing changed",
        ) from None
    if unchanged:
        return None
    return _renew(
        session,
        interrupt,
        run,
        submitted,
        {"evidence": current, "evidence_hash": current_hash, "evidence_canon": EVIDENCE_CANON},
        {"evidence_hash": current_hash},
    )


def revalidates(flow: Flow, interrupt: Interrupt) -> bool:
    """Whether check 8 has anything to do for ``interrupt`` here: a policy to renew its
    question under, or a revalidator recomputing its evidence (else it passes unchanged)."""
    return interrupt.name in flow.revalidators or policy_renewal(flow, interrupt) is not None


def _renew(
    session: Session,
    interrupt: Interrupt,
    run: Run,
    submitted: dict[str, Any],
    changes: dict[str, Any],
    detail: dict[str, Any],
) -> Interrupt:
    """A new interrupt supersedes ``interrupt`` with ``changes``, the submitted input kept;
    the run's event goes with them."""
    renewed = interrupt_store.successor(interrupt, previous_input=submitted, **changes)
    event = event_store.events_insert(
        session,
        run.id,
        actor="system:revalidation",
        events=[(EventKind.REVIEW_RENEWED, {"old": interrupt.id, "new": renewed.id, **detail})],
    )
    if not interrupt_store.supersede(
        session, interrupt, renewed, resolved_by="system:revalidation", writes=event
    ):
        raise Refusal(ResumeOutcome.STALE, "interrupt was resolved concurrently")
    return renewed
