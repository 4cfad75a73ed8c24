"""The resume gateway: nine checks in a fixed order; the first failure decides the outcome.

Every attempt is recorded with its outcome, reason and payload (a refused payload is kept as
evidence, credentials redacted, bounded). Acceptance and the run's move to ``resuming`` are one
transaction; the resume task is published after it commits. Idempotency keys belong to the
authenticated actor and bind to the payload they were first used with.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pydantic import BaseModel, ValidationError
from pydantic_core import to_jsonable_python
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import interrupts as interrupt_store
from models import runs as run_store
from models.canonical import EVIDENCE_CANON, evidence_hash, json_hash, same_json
from models.contracts import ActorRef, ResumeContract, ResumeResult, json_copy
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
from models.identity import normal_actor_id
from models.tables import Actor, Interrupt, ResumeAttempt, Run
from worker.engine import dispatch
from worker.flows.declarations import PAUSE_INTERRUPT
from worker.flows.flow import Flow, Migration, RevalidationContext, continuation, load_flow_modules
from worker.flows.migration import DEFERRED
from worker.flows.schemas import BudgetGrant, describe_errors, json_schema_of, lookup
from worker.gateway.actors import Credential, redact_shaped, verified
from worker.gateway.review_checks import edit_refusal, policy_renewal
from worker.interrupts import notify, view
from worker.ops import tracing
from worker.present.safetext import escape_controls

log = logging.getLogger(__name__)
MAX_ID = 200
# A contract larger than this is malformed (it is not parsed at all).
MAX_PAYLOAD_CHARS = 64 * 1024
# What is kept of a malformed or unauthenticated submission: anyone can send those.
MAX_STORED_UNTRUSTED = 4096
MAX_REASON = 300
# Attempts that do not claim their idempotency key: a repeat answers from the original, and a
# submitter who did not authenticate has no key (keys belong to authenticated actors).
UNBOUND_OUTCOMES = frozenset(
    {
        ResumeOutcome.DUPLICATE,
        ResumeOutcome.KEY_REUSED,
        ResumeOutcome.MALFORMED,
        ResumeOutcome.UNAUTHENTICATED,
    }
)
UNTRUSTED_OUTCOMES = frozenset({ResumeOutcome.MALFORMED, ResumeOutcome.UNAUTHENTICATED})
RENEWED_REASON = "evidence changed while the run waited; a new review is required"
RENEWED_POLICY_REASON = (
    "the flow's approval policy changed while the run waited, and answers given under the "
    "old one are not honoured; a new review is required"
)
# What a contract decides: all of it but the window in which it may be submitted, so that a
# retry rebuilt with a later expires_at is still the same submission.
NOT_HASHED = frozenset({"expires_at"})


class _LostRace(Exception):
    """Control flow: acceptance lost a race after it began writing. Its transaction must roll
    back (no savepoint is paid for on the accepted path); the attempt is recorded as stale."""


class Refusal(Exception):
    """Control flow inside the gateway: a check failed with ``outcome``; nothing was written."""

    def __init__(self, outcome: ResumeOutcome, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class _Undecided(Refusal):
    """A refusal that says nothing of the answer: this process's code cannot check it now (the
    interrupt's schema is missing or changed here, or the flow's revalidation failed).

    A person's resume is refused as any other; the system's answer waits (``SystemDeferred``).
    """


class SystemDeferred(Exception):
    """``resume_as_system`` decided nothing and wrote nothing: the code that must check the
    system's answer is not here as the interrupt needs it. Leave the interrupt pending."""


@dataclass(frozen=True)
class SystemResume:
    """What ``resume_as_system`` did; ``renewed``: the flow and the interrupt that now asks in
    place of the old one (a renewed review), for the caller to notify after commit."""

    result: ResumeResult
    renewed: tuple[Flow, Interrupt] | None = None
    # Whether the run was released (an answer to an ask of a group whose need is not met
    # yet records the answer and the run waits on).
    released: bool = False


class Proof(Protocol):
    """Who answers, proven otherwise than by the actor's own credential: an answer link's
    token, a chat's signed callback (``worker.gateway.answer_links``, ``worker.ops.notify_slack``).

    ``verify`` is check 2 for such a submission: in the attempt's transaction, given the
    contract and the row of the actor it names (locked for share, as for a credential), it
    returns the actor the proof authenticates (None: unauthenticated) or raises ``Refusal``
    (an expired or narrower proof). ``via`` is recorded on the attempt; a ``single_use``
    proof's key answers every later use as a duplicate of its first.
    """

    via: str
    single_use: bool

    def verify(
        self, session: Session, actor: Actor | None, contract: ResumeContract
    ) -> Actor | None: ...


@dataclass
class _Attempt:
    payload: Any
    credential: Credential
    run_id: str | None = None
    interrupt_id: str | None = None
    actor_id: str | None = None
    key: str | None = None
    payload_hash: str | None = None
    parsed: bool = False
    # How the submitter authenticated when not with the actor's credential.
    proof: Proof | None = None


def submit_resume(
    contract: ResumeContract | Mapping[str, Any] | Any, credential: str
) -> ResumeResult:
    """Check and record one resume attempt; on acceptance the run continues once.

    Never raises for anything a caller submits: every call ends as a recorded
    ``ResumeResult`` (an unexpected error too, named by its class). The credential is held
    wrapped from the first line on, so that no traceback's locals carry it.
    """
    secret = Credential(credential)
    del credential
    attempt = _Attempt(None, secret)
    try:
        return _submit(contract, attempt)
    except Exception as exc:
        return _last_resort(attempt, exc)


def submit_proven(
    contract: ResumeContract | Mapping[str, Any] | Any, proof: Proof, secret: str | None = None
) -> ResumeResult:
    """``submit_resume`` for a submitter proven by ``proof`` rather than a credential: every
    other check, the record and the outcome are the same. ``secret`` (the proof's token) is
    redacted wherever the submission echoes it, as a credential is."""
    attempt = _Attempt(None, Credential(secret), proof=proof)
    del secret
    try:
        return _submit(contract, attempt)
    except Exception as exc:
        return _last_resort(attempt, exc)


def _submit(contract: Any, attempt: _Attempt) -> ResumeResult:
    payload, fields, problem = _payload(contract)
    attempt.payload = payload
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
    attempt.parsed = True
    attempt.key = parsed.idempotency_key
    attempt.payload_hash = payload_hash(parsed.model_dump(mode="json"))
    # The input is kept, shown to other actors and handed to the step: a credential pasted
    # into it goes no further than here, and what is checked is what is stored.
    parsed = parsed.model_copy(update={"input": attempt.credential.redacted(parsed.input)})
    try:
        return _decide(parsed, attempt)
    except IntegrityError:
        # The same actor's submission with the same idempotency key committed first.
        return _record_repeat(attempt)


def payload_hash(contract: Mapping[str, Any]) -> str:
    """What an idempotency key binds to: the contract's decision, not its expiry."""
    return json_hash({k: v for k, v in contract.items() if k not in NOT_HASHED})


def _last_resort(attempt: _Attempt, exc: Exception) -> ResumeResult:
    """An error no check foresaw: recorded as a refusal named by the error's class."""
    log.error(
        "resume attempt failed unexpectedly (%s); recorded as a refusal",
        type(exc).__name__,
        exc_info=exc,
        extra={"action": "resume_error", "run_id": attempt.run_id},
    )
    outcome = ResumeOutcome.INVALID_INPUT if attempt.parsed else ResumeOutcome.MALFORMED
    reason = f"the submission could not be processed ({type(exc).__name__}); nothing changed"
    return _record(attempt, outcome, reason, claim=False)


def _decide(contract: ResumeContract, attempt: _Attempt) -> ResumeResult:
    try:
        return _decide_once(contract, attempt)
    except _LostRace as lost:
        return _record(attempt, ResumeOutcome.STALE, str(lost))


def _decide_once(contract: ResumeContract, attempt: _Attempt) -> ResumeResult:
    notify_after: tuple[Flow, Interrupt] | None = None
    accepted: _Accepted | None = None
    with transaction() as session:
        # Checks 2 and 3 read in one round trip: the actor (held until commit, so that a revoke
        # is ordered after this decision) and the attempt that claimed this key, if any.
        row, original = interrupt_store.actor_and_original(
            session, normal_actor_id(contract.actor.id), contract.idempotency_key
        )
        if attempt.proof is None:
            actor = verified(row, attempt.credential)
        else:
            try:
                actor = attempt.proof.verify(session, row, contract)
            except Refusal as refusal:
                # The proof does not cover this submission: its key stays unclaimed.
                return _insert(session, attempt, refusal.outcome, refusal.reason, claim=False)
        if actor is None:
            return _insert(
                session,
                attempt,
                ResumeOutcome.UNAUTHENTICATED,
                "unknown actor, revoked actor or bad credential"
                if attempt.proof is None
                else f"the {attempt.proof.via.partition(':')[0]} does not authenticate this "
                "actor (unknown, revoked or another's)",
            )
        # From here on the attempt is the authenticated actor's, under the id's normal form.
        attempt.actor_id = actor.id
        if actor.kind != contract.actor.type:
            # The record must say what answered: a service's credential never answers as a
            # person (nor the other way round). Unbound: the key stays free for a right retry.
            return _insert(
                session,
                attempt,
                ResumeOutcome.UNAUTHENTICATED,
                f"actor {actor.id} is a {actor.kind}, not a {contract.actor.type}: "
                f"answer as {actor.kind}:{actor.id}",
            )
        if original is not None:
            return _repeat(session, attempt, original)
        try:
            interrupt, run, flow, submitted, new_interrupt = _check(session, contract, actor)
            if new_interrupt is None:
                accepted = _accept(
                    session,
                    contract,
                    submitted,
                    attempt,
                    interrupt,
                    run,
                    revalidated=flow is not None,
                )
                result = accepted.result
        except Refusal as refusal:
            return _insert(session, attempt, refusal.outcome, refusal.reason)
        if new_interrupt is not None and flow is not None:
            notify_after = (flow, new_interrupt)
            policy_changed = new_interrupt.policy_version != interrupt.policy_version
            result = _insert(
                session,
                attempt,
                ResumeOutcome.RENEWED_REVIEW_REQUIRED,
                RENEWED_POLICY_REASON if policy_changed else RENEWED_REASON,
                new_interrupt_id=new_interrupt.id,
            )
    if notify_after is not None:
        notify(*notify_after)
    if accepted is not None and accepted.group is not None:
        _close_group(run.id, interrupt.checkpoint_id, accepted.group)
    if accepted is not None:
        traced = tracing.answered(
            run.id,
            interrupt.id,
            interrupt.name,
            interrupt.created_at,
            interrupt.trace_parent,
            actor=f"{contract.actor.type}:{attempt.actor_id}",
            outcome=result.outcome.value,
        )
        if accepted.released:
            with tracing.within(traced):
                dispatch.publish_step(run.id, flow=run.flow_name, step=run.next_step, resume=True)
    return result


def _close_group(run_id: str, checkpoint_id: str, group: str) -> None:
    """The asks of a met group still open are closed now (the resumed step's commit closes
    them too, should this fail): a late answer to one finds it superseded."""
    try:
        with transaction() as session:
            closed = interrupt_store.close_group(session, run_id, checkpoint_id, group)
            if closed:
                run_store.record_event(
                    session,
                    run_id,
                    actor=interrupt_store.GROUP_ACTOR,
                    kind=EventKind.GROUP_CLOSED,
                    detail={"group": group, "closed": closed, "reason": "the group's need is met"},
                )
    except Exception:
        log.warning(
            "closing the open asks of group %r failed; the resumed step closes them",
            group,
            exc_info=True,
            extra={"action": "group_close_failed", "run_id": run_id},
        )


def _check(
    session: Session, contract: ResumeContract, actor: Actor
) -> tuple[Interrupt, Run, Flow | None, dict[str, Any], Interrupt | None]:
    """Checks 4 to 8; returns what acceptance needs, or a renewed interrupt, or raises Refusal."""
    # Concurrent resumes of one interrupt queue here (SQLite already serialises writers).
    found = interrupt_store.lock_with_run(session, contract.interrupt_id)
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
    submitted = _submitted(_validate_input(contract, interrupt))
    code = _flow_for(run)
    if contract.decision is Decision.APPROVED:
        refused = edit_refusal(interrupt, submitted, roles, code[0] if code else None)
        if refused is not None:
            raise Refusal(ResumeOutcome.DENIED, f"actor {actor.id}: {refused}")
    new_interrupt = None
    if code is not None:
        new_interrupt = _revalidate(session, *code, interrupt, run, submitted)
    return interrupt, run, code[0] if code else None, submitted, new_interrupt


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


def _submitted(validated: BaseModel | None) -> dict[str, Any]:
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
    if not same_json(contract.scope, interrupt.scope):
        problems.append("scope differs from the interrupt's scope")
    if contract.policy_version is not None and contract.policy_version != interrupt.policy_version:
        problems.append(
            f"policy version {contract.policy_version!r} is not the interrupt's "
            f"({interrupt.policy_version!r})"
        )
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
        raise _Undecided(
            ResumeOutcome.UNKNOWN_SCHEMA,
            f"input schema {schema} is registered by none of the flows loaded here "
            "(INTERLUDE_FLOWS); nothing changed",
        )
    if json_schema_of(model) != interrupt.json_schema:
        # The model changed under the same version: the responder saw another form.
        raise _Undecided(
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
    checkpoint = run_store.get_checkpoint(session, interrupt.checkpoint_id)
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
        raise _Undecided(
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


def _renew(
    session: Session,
    interrupt: Interrupt,
    run: Run,
    submitted: dict[str, Any],
    changes: dict[str, Any],
    detail: dict[str, Any],
) -> Interrupt:
    """A new interrupt supersedes ``interrupt`` with ``changes``, the submitted input kept."""
    renewed = interrupt_store.supersede(
        session,
        interrupt,
        resolved_by="system:revalidation",
        previous_input=submitted,
        **changes,
    )
    if renewed is None:
        raise Refusal(ResumeOutcome.STALE, "interrupt was resolved concurrently")
    run_store.record_event(
        session,
        run.id,
        actor="system:revalidation",
        kind=EventKind.REVIEW_RENEWED,
        detail={"old": interrupt.id, "new": renewed.id, **detail},
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
) -> _Accepted:
    """Check 9: resolve the interrupt and move the run to ``resuming``, all or nothing.

    Without the flow's code here, check 8 is left to the worker that continues the run
    (``revalidation: deferred`` on the event). An ask of a group releases the run only with
    the answer that meets the group's need; the others are recorded and the run waits on.
    """
    now = utcnow()
    # Recorded under the authenticated id's normal form, not as the contract spells it.
    who = attempt.actor_id or contract.actor.id
    actor = f"{contract.actor.type}:{who}"
    group = None
    if interrupt.ask_group is not None:
        group = _group_progress(session, interrupt, run)
        if not group.met:
            return _Accepted(
                _answer_in_group(session, contract, submitted, attempt, interrupt, group)
            )
    fields: dict[str, Any] = {"dispatched_at": now}
    approved = contract.decision is Decision.APPROVED
    if interrupt.kind == InterruptKind.BUDGET.value and approved:
        grant = BudgetGrant.model_validate(submitted)
        allowance = (run.budget_allowance or 0.0) + grant.units
        if not math.isfinite(allowance):
            raise Refusal(ResumeOutcome.INVALID_INPUT, "the budget would not be a finite number")
        fields["budget_allowance"] = allowance
    if interrupt.name == PAUSE_INTERRUPT:
        fields["pause_requested_by"] = None
    outcome = ResumeOutcome.ACCEPTED
    values = _attempt_values(attempt, outcome, f"{contract.decision.value} by {actor}")
    resolve, resolved = interrupt_store.transition_write(
        interrupt,
        "resolve",
        decision=contract.decision.value,
        resume_input=submitted,
        resolved_by=who,
        resolved_at=now,
    )
    # One statement: the run's move with its event, the interrupt's resolution, and the
    # attempt that accepted it, each written only if the one before it matched.
    try:
        attempt_id = run_store.move_recorded(
            session,
            run,
            EventKind.ACCEPT_RESUME,
            actor=actor,
            detail={
                "interrupt_id": interrupt.id,
                "decision": contract.decision.value,
                **({} if revalidated else {"revalidation": DEFERRED}),
            },
            writes=[resolve],
            then=interrupt_store.attempt_write(values),
            **fields,
        )
    except StaleStateError as exc:
        raise _LostRace(str(exc)) from None
    if attempt_id is None:  # (the run moved: _LostRace rolls the transaction back)
        raise _LostRace("interrupt was resolved concurrently")
    interrupt_store.moved(interrupt, resolved)
    result = _recorded(attempt, int(attempt_id), outcome, values["reason"])
    return _Accepted(result, released=True, group=interrupt.ask_group if group else None)


@dataclass(frozen=True)
class _Accepted:
    """An accepted answer; ``released``: it moved the run to ``resuming`` (publish its step);
    ``group``: the ask group whose need it met (its open asks close after commit)."""

    result: ResumeResult
    released: bool = False
    group: str | None = None


@dataclass(frozen=True)
class _Group:
    answered: int
    open: int
    need: int

    @property
    def met(self) -> bool:
        # This answer counts too.
        return self.answered + 1 >= self.need


def _group_progress(session: Session, interrupt: Interrupt, run: Run) -> _Group:
    """Where the interrupt's group stands, read with the run locked: answers racing for the
    group's last place are decided one after the other, so it is completed exactly once."""
    locked = run_store.lock_run(session, run.id)
    if (
        locked is None
        or locked.state != RunState.WAITING.value
        or locked.state_version != interrupt.state_version
    ):
        raise Refusal(ResumeOutcome.STALE, "the run moved on: its ask group was released")
    answered, still_open = interrupt_store.group_counts(session, interrupt)
    return _Group(answered, still_open, int(interrupt.group_need or 1))


def _answer_in_group(
    session: Session,
    contract: ResumeContract,
    submitted: dict[str, Any],
    attempt: _Attempt,
    interrupt: Interrupt,
    group: _Group,
) -> ResumeResult:
    """Record an answer to one ask of a group whose need is not met yet: the run waits on."""
    who = attempt.actor_id or contract.actor.id
    actor = f"{contract.actor.type}:{who}"
    if not interrupt_store.transition(
        session,
        interrupt,
        "resolve",
        decision=contract.decision.value,
        resume_input=submitted,
        resolved_by=who,
    ):
        raise _LostRace("interrupt was resolved concurrently")
    given = group.answered + 1
    run_store.record_event(
        session,
        interrupt.run_id,
        actor=actor,
        kind=EventKind.ASK_ANSWERED,
        detail={
            "interrupt_id": interrupt.id,
            "group": interrupt.ask_group,
            "decision": contract.decision.value,
            "answered": given,
            "need": group.need,
        },
    )
    reason = (
        f"{contract.decision.value} by {actor}; group {interrupt.ask_group!r}: {given} of "
        f"{group.need} needed answered, the run waits on the rest"
    )
    return _insert(session, attempt, ResumeOutcome.ACCEPTED, reason)


def _repeat(session: Session, attempt: _Attempt, original: ResumeAttempt) -> ResumeResult:
    """The actor used this key before: the same payload is a duplicate, another is refused."""
    first_hash = original.payload_hash
    if first_hash is None and isinstance(original.payload, dict):
        # Recorded before keys were bound to payloads: hash what was stored then.
        first_hash = payload_hash(original.payload)
    single_use = attempt.proof is not None and attempt.proof.single_use
    if first_hash == attempt.payload_hash or single_use:
        # A single-use proof (an answer link) decides once, whatever a later use submits.
        return _insert(
            session,
            attempt,
            ResumeOutcome.DUPLICATE,
            f"duplicate of attempt {original.id} ({original.outcome})",
            original=original,
        )
    return _insert(
        session,
        attempt,
        ResumeOutcome.KEY_REUSED,
        f"this idempotency key was used by attempt {original.id} ({original.outcome}) for "
        "another contract; submit this one with a new key",
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
    claim: bool = True,
) -> ResumeResult:
    values = _attempt_values(attempt, outcome, reason, claim=claim)
    attempt_id = interrupt_store.insert_attempt(session, **values)
    return _recorded(
        attempt,
        attempt_id,
        outcome,
        values["reason"],
        original=original,
        new_interrupt_id=new_interrupt_id,
    )


def _attempt_values(
    attempt: _Attempt, outcome: ResumeOutcome, reason: str, *, claim: bool = True
) -> dict[str, Any]:
    """The attempt's row as it is stored: the credential redacted everywhere, the reason
    capped (the result reports the reason as stored)."""
    redact = attempt.credential.redact
    return {
        "run_id": _redacted_id(attempt.run_id),
        "interrupt_id": _redacted_id(attempt.interrupt_id),
        "actor_id": _redacted_id(attempt.actor_id),
        "idempotency_key": _redacted_id(attempt.key),
        "original_key": attempt.key if claim and outcome not in UNBOUND_OUTCOMES else None,
        "payload_hash": attempt.payload_hash,
        "outcome": outcome.value,
        # One line, whatever text of the caller's the reason repeats (ids, field names).
        "reason": _capped(redact(escape_controls(reason))),
        "payload": _stored_payload(attempt, outcome),
        # Only when set: the answers made with a credential keep the statement they had.
        **({"via": attempt.proof.via} if attempt.proof is not None else {}),
    }


def _recorded(
    attempt: _Attempt,
    attempt_id: int,
    outcome: ResumeOutcome,
    reason: str,
    *,
    original: ResumeAttempt | None = None,
    new_interrupt_id: str | None = None,
) -> ResumeResult:
    """The result of the attempt recorded as ``attempt_id``, logged."""
    # What callers supplied (ids, reasons built from them) goes into fields, never the message.
    log.info(
        "resume attempt %d: %s",
        attempt_id,
        outcome.value,
        extra={
            "action": "resume",
            "attempt_id": attempt_id,
            "run_id": attempt.run_id,
            "interrupt_id": attempt.interrupt_id,
            "actor_id": attempt.actor_id,
            "outcome": outcome.value,
            "reason": reason,
        },
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


def _record(
    attempt: _Attempt, outcome: ResumeOutcome, reason: str, *, claim: bool = True
) -> ResumeResult:
    with transaction() as session:
        return _insert(session, attempt, outcome, reason, claim=claim)


def _record_repeat(attempt: _Attempt) -> ResumeResult:
    """After losing the race for the actor's key: answer from the attempt that won it."""
    with transaction() as session:
        original = (
            interrupt_store.original_attempt(session, attempt.actor_id, attempt.key)
            if attempt.actor_id is not None and attempt.key is not None
            else None
        )
        if original is None:
            raise RuntimeError("idempotency key conflict without an original attempt")
        return _repeat(session, attempt, original)


def _capped(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def _redacted_id(value: str | None) -> str | None:
    return redact_shaped(value) if value is not None else None


def _stored_payload(attempt: _Attempt, outcome: ResumeOutcome) -> Any:
    """The payload as kept: credentials redacted; from anyone unauthenticated, at most 4 KB."""
    payload = attempt.credential.redacted(attempt.payload)
    if outcome not in UNTRUSTED_OUTCOMES:
        return payload
    text = json.dumps(payload)
    if len(text) <= MAX_STORED_UNTRUSTED:
        return payload
    whole = "sha256:" + hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    cut = MAX_STORED_UNTRUSTED
    while True:
        kept = {"truncated": text[:cut], "chars": len(text), "sha256": whole}
        if len(json.dumps(kept)) <= MAX_STORED_UNTRUSTED:
            return kept
        cut //= 2


def _first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "contract"
    return f"{where}: {error['msg']}"


def _short_str(value: object) -> str | None:
    return value[:MAX_ID] if isinstance(value, str) else None


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
        return run_store.storable_copy(value)
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value


def resume_as_system(
    session: Session,
    interrupt: Interrupt,
    *,
    actor_id: str,
    input: dict[str, Any],
    reason: str,
    actor_type: str = "service",
    given: bool = False,
) -> SystemResume:
    """Approve ``interrupt`` with ``input`` on the system's behalf (the ``default`` expiry policy).

    It goes through a person's checks but authentication, deadlines and roles: binding, input,
    the flow's revalidation (check 8: evidence that changed supersedes the interrupt with a
    renewed review, as for a person; the caller notifies about it after commit) and acceptance.
    It is recorded as an attempt (a refusal's reason starts with ``reason``); the idempotency key
    ``<actor>:<interrupt>`` makes a second application impossible. Fails closed, writing
    nothing (SystemDeferred), where this process cannot check the answer: the flow's code is not
    here, the interrupt's schema is unknown or changed here, or the revalidation fails. Runs in
    the caller's transaction; the caller publishes the resume task after commit when accepted.

    ``given``: an answer an actor gave earlier (an event kept in the run's mailbox), delivered
    now as that actor's: without the flow's code here its revalidation is left to the worker,
    as for a person's resume, rather than deferred.
    """
    run = run_store.find_run(session, interrupt.run_id)
    contract = ResumeContract(
        schema_version="resume.v1",
        run_id=interrupt.run_id,
        checkpoint_id=interrupt.checkpoint_id,
        interrupt_id=interrupt.id,
        actor=ActorRef(type=actor_type, id=actor_id),
        decision=Decision.APPROVED,
        input=input,
        scope=interrupt.scope,
        evidence_hash=interrupt.evidence_hash,
        idempotency_key=f"{actor_id}:{interrupt.id}",
        expires_at=utcnow() + (interrupt.deadline - interrupt.created_at),
    )
    dumped = contract.model_dump(mode="json")
    attempt = _Attempt(
        dumped,
        Credential(None),
        run_id=interrupt.run_id,
        interrupt_id=interrupt.id,
        actor_id=actor_id,
        key=contract.idempotency_key,
        payload_hash=payload_hash(dumped),
        parsed=True,
    )
    try:
        if run is None:
            raise Refusal(ResumeOutcome.STALE, f"no run {interrupt.run_id}")
        _check_binding(contract, interrupt, run)
        submitted = _submitted(_validate_input(contract, interrupt))
        code = _flow_for(run)
        if code is None and given:
            accepted = _accept(
                session, contract, submitted, attempt, interrupt, run, revalidated=False
            )
            return SystemResume(accepted.result, released=accepted.released)
        if code is None:
            # A person's resume leaves check 8 to the worker; an approval nobody gave waits
            # instead for a process that can check the evidence before it is given.
            raise SystemDeferred(
                f"flow {run.flow_name!r} v{run.flow_version} is not loaded here "
                "(INTERLUDE_FLOWS), so its revalidation cannot check the evidence"
            )
        renewed = _revalidate(session, *code, interrupt, run, submitted)
        if renewed is not None:
            result = _insert(
                session,
                attempt,
                ResumeOutcome.RENEWED_REVIEW_REQUIRED,
                f"{reason}: {RENEWED_REASON}",
                new_interrupt_id=renewed.id,
            )
            return SystemResume(result, renewed=(code[0], renewed))
        # A savepoint here: the sweep goes on with its batch after a lost race.
        with session.begin_nested():
            accepted = _accept(session, contract, submitted, attempt, interrupt, run)
            return SystemResume(accepted.result, released=accepted.released)
    except _Undecided as undecided:
        raise SystemDeferred(undecided.reason) from None
    except _LostRace as lost:
        return SystemResume(_insert(session, attempt, ResumeOutcome.STALE, f"{reason}: {lost}"))
    except Refusal as refusal:
        return SystemResume(
            _insert(session, attempt, refusal.outcome, f"{reason}: {refusal.reason}")
        )
