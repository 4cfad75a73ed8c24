"""The resume gateway: nine checks in a fixed order; the first failure decides the outcome.

Every attempt is recorded with its outcome, reason and payload (a refused payload is kept as
evidence). Acceptance and the run's move to ``resuming`` are one transaction; the resume task
is published after it commits.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from typing import Any

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import interrupts as store
from models import runs as run_store
from models.contracts import ActorRef, ResumeContract, ResumeResult, evidence_hash
from models.db import transaction, utcnow
from models.enums import (
    Decision,
    EventKind,
    InterruptKind,
    InterruptStatus,
    ResumeOutcome,
    RunState,
)
from models.errors import InterludeError, StaleStateError
from models.tables import Interrupt, ResumeAttempt, Run
from worker import dispatch
from worker.actors import authenticate
from worker.declarations import PAUSE_INTERRUPT
from worker.flows import Flow, Migration, RevalidationContext, continuation, load_flow_modules
from worker.interrupts import notify, view
from worker.migration import DEFERRED
from worker.schemas import BudgetGrant, describe_errors, json_schema_of, lookup

log = logging.getLogger(__name__)
MAX_ID = 200
# A refused payload is kept as evidence, but not without bound.
MAX_PAYLOAD_CHARS = 64 * 1024
# Attempts that do not claim their idempotency key: a duplicate has no key of its own, and an
# unauthenticated submitter must not be able to burn the key of the real responder.
UNBOUND_OUTCOMES = frozenset(
    {ResumeOutcome.DUPLICATE, ResumeOutcome.MALFORMED, ResumeOutcome.UNAUTHENTICATED}
)


class _LostRace(Exception):
    """Control flow: acceptance lost a race after it began writing. Its transaction must roll
    back (no savepoint is paid for on the accepted path); the attempt is recorded as stale."""


class Refusal(Exception):
    """Control flow inside the gateway: a check failed with ``outcome``; nothing was written."""

    def __init__(self, outcome: ResumeOutcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


@dataclass
class _Attempt:
    payload: Any
    run_id: str | None
    interrupt_id: str | None
    actor_id: str | None
    key: str | None


def submit_resume(
    contract: ResumeContract | Mapping[str, Any] | Any, credential: str
) -> ResumeResult:
    """Check and record one resume attempt; on acceptance the run continues once.

    Never raises for anything a caller submits: every refusal is a recorded ``ResumeResult``.
    """
    payload, fields, problem = _payload(contract)
    attempt = _Attempt(payload, None, None, None, None)
    if isinstance(fields, dict):
        attempt.run_id = _short_str(fields.get("run_id"))
        attempt.interrupt_id = _short_str(fields.get("interrupt_id"))
        actor = fields.get("actor")
        attempt.actor_id = _short_str(actor.get("id")) if isinstance(actor, dict) else None
    if problem is not None:
        return _record(attempt, ResumeOutcome.MALFORMED, problem)
    try:
        # What is checked is exactly what is stored: the JSON form of the submission.
        parsed = ResumeContract.model_validate(payload)
    except ValidationError as exc:
        return _record(attempt, ResumeOutcome.MALFORMED, _first_error(exc))
    attempt.key = parsed.idempotency_key
    try:
        return _decide(parsed, credential, attempt)
    except IntegrityError:
        # Another submission with the same idempotency key committed first.
        return _record(
            attempt, ResumeOutcome.DUPLICATE, "an attempt with this idempotency key committed first"
        )


def _decide(contract: ResumeContract, credential: str, attempt: _Attempt) -> ResumeResult:
    try:
        return _decide_once(contract, credential, attempt)
    except _LostRace as lost:
        return _record(attempt, ResumeOutcome.STALE, str(lost))


def _decide_once(contract: ResumeContract, credential: str, attempt: _Attempt) -> ResumeResult:
    notify_after: tuple[Flow, Interrupt] | None = None
    with transaction() as session:
        original = store.original_attempt(session, contract.idempotency_key)
        if original is not None:
            return _duplicate(session, attempt, original)
        try:
            interrupt, run, flow, submitted, new_interrupt = _check(session, contract, credential)
            if new_interrupt is None:
                result = _accept(
                    session,
                    contract,
                    submitted,
                    attempt,
                    interrupt,
                    run,
                    revalidated=flow is not None,
                )
        except Refusal as refusal:
            return _insert(session, attempt, refusal.outcome, refusal.reason)
        if new_interrupt is not None and flow is not None:
            notify_after = (flow, new_interrupt)
            result = _insert(
                session,
                attempt,
                ResumeOutcome.RENEWED_REVIEW_REQUIRED,
                "evidence changed while the run waited; a new review is required",
                new_interrupt_id=new_interrupt.id,
            )
    if notify_after is not None:
        notify(*notify_after)
    if result.accepted:
        dispatch.publish_step(run.id, resume=True)
    return result


def _check(
    session: Session, contract: ResumeContract, credential: str
) -> tuple[Interrupt, Run, Flow | None, dict[str, Any], Interrupt | None]:
    """Checks 3 to 8; returns what acceptance needs, or a renewed interrupt, or raises Refusal."""
    actor = authenticate(session, contract.actor.id, credential)
    if actor is None:
        raise Refusal(
            ResumeOutcome.UNAUTHENTICATED, "unknown actor, revoked actor or bad credential"
        )
    # Concurrent resumes of one interrupt queue here (SQLite already serialises writers).
    found = store.lock_with_run(session, contract.interrupt_id)
    if found is None:
        raise Refusal(ResumeOutcome.STALE, f"no interrupt {contract.interrupt_id}")
    interrupt, run = found
    _check_binding(contract, interrupt, run)
    now = utcnow()
    if interrupt.deadline <= now:
        raise Refusal(
            ResumeOutcome.EXPIRED,
            f"the interrupt's deadline passed at {interrupt.deadline.isoformat()}",
        )
    expires_at = (
        contract.expires_at
        if contract.expires_at.tzinfo
        else contract.expires_at.replace(tzinfo=UTC)
    )
    if expires_at <= now:
        raise Refusal(ResumeOutcome.EXPIRED, f"the contract expired at {expires_at.isoformat()}")
    roles = set(actor.roles or [])
    if not roles & set(interrupt.roles or []):
        raise Refusal(
            ResumeOutcome.DENIED,
            f"actor {actor.id} holds none of the roles {sorted(interrupt.roles)}",
        )
    if interrupt.separate_from_starter and run.started_by == actor.id:
        raise Refusal(
            ResumeOutcome.DENIED, f"actor {actor.id} started this run and may not release it"
        )
    validated = _validate_input(contract, interrupt)
    submitted = validated.model_dump(mode="json") if validated is not None else {}
    code = _flow_for(run)
    new_interrupt = None
    if code is not None:
        new_interrupt = _revalidate(session, *code, interrupt, run, submitted)
    return interrupt, run, code[0] if code else None, submitted, new_interrupt


def _check_binding(contract: ResumeContract, interrupt: Interrupt, run: Run) -> None:
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
    if _canonical(contract.scope) != _canonical(interrupt.scope):
        problems.append("scope differs from the interrupt's scope")
    if problems:
        raise Refusal(ResumeOutcome.STALE, "; ".join(problems))


def _flow_for(run: Run) -> tuple[Flow, Migration | None] | None:
    """The flow code that revalidates a resume of ``run`` here, if this process has any.

    The run's own version, else the newest version declaring a migration from it (its
    revalidation then sees the migrated state). Input validation never needs either.
    """
    try:
        return continuation(run.flow_name, run.flow_version, run_id=run.id)
    except InterludeError:
        return None


def _validate_input(contract: ResumeContract, interrupt: Interrupt) -> BaseModel | None:
    """Check 7, against the schema recorded on the interrupt, wherever it is registered here."""
    # Schemas are registered by the flow modules: any loaded version of any flow may hold it.
    load_flow_modules()
    model = lookup(interrupt.schema_name, interrupt.schema_version)
    schema = f"{interrupt.schema_name}.v{interrupt.schema_version}"
    if model is None:
        raise Refusal(
            ResumeOutcome.UNKNOWN_SCHEMA,
            f"input schema {schema} is registered by none of the flows loaded here "
            "(INTERLUDE_FLOWS); nothing changed",
        )
    if json_schema_of(model) != interrupt.json_schema:
        # The model changed under the same version: the responder saw another form.
        raise Refusal(
            ResumeOutcome.INVALID_INPUT,
            f"input schema {schema} changed since the interrupt was raised",
        )
    if contract.decision is Decision.REJECTED and not contract.input:
        return None
    try:
        return model.model_validate(contract.input)
    except ValidationError as exc:
        raise Refusal(ResumeOutcome.INVALID_INPUT, f"{schema}: {describe_errors(exc)}") from None


def _revalidate(
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
    revalidator = flow.revalidators.get(interrupt.name)
    if revalidator is None:
        return None
    checkpoint = run_store.get_checkpoint(session, interrupt.checkpoint_id)
    state = dict(checkpoint.state or {}) if checkpoint is not None else {}
    try:
        if migration is not None:
            state = migration(state)
        context = RevalidationContext(
            run_id=run.id, input=run.input, state=state, interrupt=view(interrupt)
        )
        current = revalidator(context)
        current_hash = evidence_hash(current)
    except Exception as exc:
        raise Refusal(
            ResumeOutcome.RENEWED_REVIEW_REQUIRED,
            f"business revalidation failed ({type(exc).__name__}: {exc}); nothing changed",
        ) from None
    if current_hash == interrupt.evidence_hash:
        return None
    renewed = store.supersede(
        session,
        interrupt,
        resolved_by="system:revalidation",
        evidence=current,
        evidence_hash=current_hash,
        previous_input=submitted,
    )
    if renewed is None:
        raise Refusal(ResumeOutcome.STALE, "interrupt was resolved concurrently")
    run_store.record_event(
        session,
        run.id,
        actor="system:revalidation",
        kind=EventKind.REVIEW_RENEWED,
        detail={"old": interrupt.id, "new": renewed.id, "evidence_hash": current_hash},
    )
    return renewed


def _accept(
    session: Session,
    contract: ResumeContract,
    submitted: dict[str, Any],
    attempt: _Attempt,
    interrupt: Interrupt,
    run: Run,
    *,
    revalidated: bool = True,
) -> ResumeResult:
    """Check 9: resolve the interrupt and move the run to ``resuming``, all or nothing.

    Without the flow's code here, check 8 is left to the worker that continues the run
    (``revalidation: deferred`` on the event).
    """
    now = utcnow()
    actor = f"{contract.actor.type}:{contract.actor.id}"
    fields: dict[str, Any] = {"dispatched_at": now}
    approved = contract.decision is Decision.APPROVED
    if interrupt.kind == InterruptKind.BUDGET.value and approved:
        grant = BudgetGrant.model_validate(submitted)
        fields["budget_allowance"] = (run.budget_allowance or 0.0) + grant.units
    if interrupt.name == PAUSE_INTERRUPT:
        fields["pause_requested_by"] = None
    try:
        run_store.move(
            session,
            run,
            EventKind.ACCEPT_RESUME,
            actor=actor,
            detail={
                "interrupt_id": interrupt.id,
                "decision": contract.decision.value,
                **({} if revalidated else {"revalidation": DEFERRED}),
            },
            **fields,
        )
    except StaleStateError as exc:
        raise _LostRace(str(exc)) from None
    if not store.transition(
        session,
        interrupt,
        "resolve",
        decision=contract.decision.value,
        resume_input=submitted,
        resolved_by=contract.actor.id,
        resolved_at=now,
    ):
        raise _LostRace("interrupt was resolved concurrently")
    return _insert(
        session, attempt, ResumeOutcome.ACCEPTED, f"{contract.decision.value} by {actor}"
    )


def _duplicate(session: Session, attempt: _Attempt, original: ResumeAttempt) -> ResumeResult:
    return _insert(
        session,
        attempt,
        ResumeOutcome.DUPLICATE,
        f"duplicate of attempt {original.id} ({original.outcome})",
        original=original,
    )


def _insert(
    session: Session,
    attempt: _Attempt,
    outcome: ResumeOutcome,
    reason: str,
    *,
    original: ResumeAttempt | None = None,
    new_interrupt_id: str | None = None,
) -> ResumeResult:
    attempt_id = store.insert_attempt(
        session,
        run_id=attempt.run_id,
        interrupt_id=attempt.interrupt_id,
        actor_id=attempt.actor_id,
        idempotency_key=attempt.key,
        original_key=attempt.key if outcome not in UNBOUND_OUTCOMES else None,
        outcome=outcome.value,
        reason=reason,
        payload=attempt.payload,
    )
    log.info(
        "resume %s: %s",
        outcome.value,
        reason,
        extra={"action": "resume", "run_id": attempt.run_id, "outcome": outcome.value},
    )
    return ResumeResult(
        outcome=outcome,
        reason=reason,
        attempt_id=attempt_id,
        run_id=attempt.run_id,
        interrupt_id=attempt.interrupt_id,
        original_outcome=ResumeOutcome(original.outcome) if original is not None else None,
        new_interrupt_id=new_interrupt_id,
    )


def _record(attempt: _Attempt, outcome: ResumeOutcome, reason: str) -> ResumeResult:
    with transaction() as session:
        if outcome is ResumeOutcome.DUPLICATE and attempt.key is not None:
            original = store.original_attempt(session, attempt.key)
            if original is not None:
                return _duplicate(session, attempt, original)
        return _insert(session, attempt, outcome, reason)


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "contract"
    return f"{where}: {error['msg']}"


def _short_str(value: object) -> str | None:
    return value[:MAX_ID] if isinstance(value, str) else None


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def _payload(contract: Any) -> tuple[Any, Any, str | None]:
    """What was submitted: as storable JSON, as the fields to read ids from, and why it cannot
    be a contract (None if it can).

    Anything at all may be submitted, so every failure here becomes a reason, never an error.
    """
    try:
        text = json.dumps(to_jsonable_python(contract), allow_nan=False)
    except Exception as exc:
        unparseable = {"unparseable": _storable(_repr(contract))}
        return unparseable, None, f"contract is not JSON: {exc}"[:300]
    data = json.loads(text)
    stored = _storable(data)
    if len(text) > MAX_PAYLOAD_CHARS:
        truncated = {"truncated": _storable(text[:MAX_PAYLOAD_CHARS])}
        return truncated, stored, f"contract is larger than {MAX_PAYLOAD_CHARS} characters"
    if stored != data:
        return stored, stored, "contract holds NUL or unpaired surrogate characters"
    return data, data, None


def _repr(value: Any) -> str:
    try:
        return repr(value)[:MAX_PAYLOAD_CHARS]
    except Exception:
        return f"<{type(value).__name__}>"


def _storable(value: Any) -> Any:
    """``value`` with the text both databases refuse (NUL, lone surrogates) escaped."""
    if isinstance(value, str):
        text = value.replace("\x00", "\\u0000")
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value


def resume_as_system(
    session: Session, interrupt: Interrupt, *, actor_id: str, input: dict[str, Any], reason: str
) -> ResumeResult:
    """Release ``interrupt`` on the system's behalf (the ``default`` expiry policy).

    It goes through the same binding, input and acceptance steps as a person's resume and is
    recorded as an attempt; the idempotency key ``<actor>:<interrupt>`` makes a second
    application impossible. Runs in the caller's transaction; the caller publishes the
    resume task after commit when the result is accepted.
    """
    run = run_store.find_run(session, interrupt.run_id)
    contract = ResumeContract(
        schema_version="resume.v1",
        run_id=interrupt.run_id,
        checkpoint_id=interrupt.checkpoint_id,
        interrupt_id=interrupt.id,
        actor=ActorRef(type="service", id=actor_id),
        decision=Decision.APPROVED,
        input=input,
        scope=interrupt.scope,
        evidence_hash=interrupt.evidence_hash,
        idempotency_key=f"{actor_id}:{interrupt.id}",
        expires_at=utcnow() + (interrupt.deadline - interrupt.created_at),
    )
    attempt = _Attempt(
        contract.model_dump(mode="json"),
        interrupt.run_id,
        interrupt.id,
        actor_id,
        contract.idempotency_key,
    )
    try:
        if run is None:
            raise Refusal(ResumeOutcome.STALE, f"no run {interrupt.run_id}")
        _check_binding(contract, interrupt, run)
        validated = _validate_input(contract, interrupt)
        submitted = validated.model_dump(mode="json") if validated is not None else {}
        # A savepoint here: the sweep goes on with its batch after a lost race.
        with session.begin_nested():
            return _accept(session, contract, submitted, attempt, interrupt, run)
    except _LostRace as lost:
        return _insert(session, attempt, ResumeOutcome.STALE, f"{reason}: {lost}")
    except Refusal as refusal:
        return _insert(session, attempt, refusal.outcome, f"{reason}: {refusal.reason}")
