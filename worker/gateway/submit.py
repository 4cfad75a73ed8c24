"""The resume gateway: nine checks in a fixed order; the first failure decides the outcome.

Check 1 parses the contract (``parsing``), check 2 authenticates the actor (``actors`` or a
``Proof``), check 3 looks up the actor's idempotency key, checks 4 to 8 are ``checks``, check 9
is ``acceptance``. Every attempt is recorded (``attempt_records``). Acceptance and the run's
move to ``resuming`` are one transaction; the resume task is published after it commits. On
PostgreSQL the plain case is first tried at once (``at_once``): one read, then one statement
guarded on what the checks read; whatever it leaves undecided is decided here, as before.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import attempts as attempt_store
from models import runs as run_store
from models.contracts import ActorRef, ResumeContract, ResumeResult
from models.db import transaction, utcnow
from models.enums import Decision, ResumeOutcome
from models.identity import normal_actor_id
from models.tables import Interrupt, Run
from worker.engine import dispatch
from worker.flows.flow import Flow
from worker.gateway import attempt_records as attempts
from worker.gateway.acceptance import Accepted, LostRace, accept, close_group
from worker.gateway.actors import Credential, verified
from worker.gateway.at_once import accept_at_once
from worker.gateway.checks import (
    RENEWED_POLICY_REASON,
    RENEWED_REASON,
    Refusal,
    Undecided,
    check_answer,
    check_binding,
    flow_for,
    revalidate,
    submitted_input,
    validate_input,
)
from worker.gateway.parsing import first_error, read_payload, short_str
from worker.interrupts import notify
from worker.ops import tracing


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
    attempt = attempts.Attempt(None, secret)
    try:
        return _submit(contract, attempt)
    except Exception as exc:
        return attempts.last_resort(attempt, exc)


def submit_proven(
    contract: ResumeContract | Mapping[str, Any] | Any,
    proof: attempts.Proof,
    secret: str | None = None,
) -> ResumeResult:
    """``submit_resume`` for a submitter proven by ``proof`` rather than a credential: every
    other check, the record and the outcome are the same. ``secret`` (the proof's token) is
    redacted wherever the submission echoes it, as a credential is."""
    attempt = attempts.Attempt(None, Credential(secret), proof=proof)
    del secret
    try:
        return _submit(contract, attempt)
    except Exception as exc:
        return attempts.last_resort(attempt, exc)


def _submit(contract: Any, attempt: attempts.Attempt) -> ResumeResult:
    payload, fields, problem = read_payload(contract)
    attempt.payload = payload
    if isinstance(fields, dict):
        attempt.run_id = short_str(fields.get("run_id"))
        attempt.interrupt_id = short_str(fields.get("interrupt_id"))
        actor = fields.get("actor")
        attempt.actor_id = short_str(actor.get("id")) if isinstance(actor, dict) else None
    if problem is not None:
        return attempts.record(attempt, ResumeOutcome.MALFORMED, problem)
    try:
        # What is checked is exactly what is stored: the JSON form of the submission.
        parsed = ResumeContract.model_validate(payload)
    except ValidationError as exc:
        return attempts.record(attempt, ResumeOutcome.MALFORMED, first_error(exc))
    attempt.parsed = True
    attempt.key = parsed.idempotency_key
    attempt.payload_hash = attempts.payload_hash(parsed.model_dump(mode="json"))
    # The input is kept, shown to other actors and handed to the step: a credential pasted
    # into it goes no further than here, and what is checked is what is stored.
    parsed = parsed.model_copy(update={"input": attempt.credential.redacted(parsed.input)})
    try:
        return _decide(parsed, attempt)
    except IntegrityError:
        # The same actor's submission with the same idempotency key committed first.
        return attempts.record_repeat(attempt)


def _decide(contract: ResumeContract, attempt: attempts.Attempt) -> ResumeResult:
    try:
        return _decide_once(contract, attempt)
    except LostRace as lost:
        return attempts.record(attempt, ResumeOutcome.STALE, str(lost))


def _decide_once(contract: ResumeContract, attempt: attempts.Attempt) -> ResumeResult:
    at_once = accept_at_once(contract, attempt)
    if at_once is not None:
        _released(contract, attempt, at_once.interrupt, at_once.run, at_once.accepted)
        return at_once.accepted.result
    notify_after: tuple[Flow, Interrupt] | None = None
    accepted: Accepted | None = None
    with transaction() as session:
        # Checks 2 and 3 read in one round trip: the actor (held until commit, so that a revoke
        # is ordered after this decision) and the attempt that claimed this key, if any.
        row, original = attempt_store.actor_and_original(
            session, normal_actor_id(contract.actor.id), contract.idempotency_key
        )
        if attempt.proof is None:
            actor = verified(row, attempt.credential)
        else:
            try:
                actor = attempt.proof.verify(session, row, contract)
            except Refusal as refusal:
                # The proof does not cover this submission: its key stays unclaimed.
                return attempts.record_in(
                    session, attempt, refusal.outcome, refusal.reason, claim=False
                )
        if actor is None:
            return attempts.record_in(
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
            return attempts.record_in(
                session,
                attempt,
                ResumeOutcome.UNAUTHENTICATED,
                f"actor {actor.id} is a {actor.kind}, not a {contract.actor.type}: "
                f"answer as {actor.kind}:{actor.id}",
            )
        if original is not None:
            return attempts.repeat(session, attempt, original)
        try:
            interrupt, run, flow, submitted, new_interrupt = check_answer(session, contract, actor)
            if new_interrupt is None:
                accepted = accept(
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
            return attempts.record_in(session, attempt, refusal.outcome, refusal.reason)
        if new_interrupt is not None and flow is not None:
            notify_after = (flow, new_interrupt)
            policy_changed = new_interrupt.policy_version != interrupt.policy_version
            result = attempts.record_in(
                session,
                attempt,
                ResumeOutcome.RENEWED_REVIEW_REQUIRED,
                RENEWED_POLICY_REASON if policy_changed else RENEWED_REASON,
                new_interrupt_id=new_interrupt.id,
            )
    if notify_after is not None:
        notify(*notify_after)
    if accepted is not None:
        _released(contract, attempt, interrupt, run, accepted)
    return result


def _released(
    contract: ResumeContract,
    attempt: attempts.Attempt,
    interrupt: Interrupt,
    run: Run,
    accepted: Accepted,
) -> None:
    """After an accepted answer committed: its group's other asks closed, its trace, and the
    resume task published if it released the run."""
    if accepted.group is not None:
        close_group(run.id, interrupt.checkpoint_id, accepted.group)
    traced = tracing.answered(
        run.id,
        interrupt.id,
        interrupt.name,
        interrupt.created_at,
        interrupt.trace_parent,
        actor=f"{contract.actor.type}:{attempt.actor_id}",
        outcome=accepted.result.outcome.value,
    )
    if accepted.released:
        with tracing.within(traced):
            dispatch.publish_step(run.id, flow=run.flow_name, step=run.next_step, resume=True)


def resume_as_system(
    session: Session,
    interrupt: Interrupt,
    *,
    actor_id: str,
    input: dict[str, Any],
    reason: str,
    actor_type: str = "service",
    given: bool = False,
    isolated: bool = True,
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

    ``isolated=False``: the caller rolls its whole transaction back on an exception (the
    sweep's batch, applied again with a savepoint per interrupt): the acceptance then takes no
    savepoint of its own (two round trips), and a lost race raises ``LostRace`` instead of
    being recorded.
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
    attempt = attempts.Attempt(
        dumped,
        Credential(None),
        run_id=interrupt.run_id,
        interrupt_id=interrupt.id,
        actor_id=actor_id,
        key=contract.idempotency_key,
        payload_hash=attempts.payload_hash(dumped),
        parsed=True,
    )
    try:
        if run is None:
            raise Refusal(ResumeOutcome.STALE, f"no run {interrupt.run_id}")
        check_binding(contract, interrupt, run)
        submitted = submitted_input(validate_input(contract, interrupt))
        code = flow_for(run)
        if code is None and given:
            accepted = accept(
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
        renewed = revalidate(session, *code, interrupt, run, submitted)
        if renewed is not None:
            result = attempts.record_in(
                session,
                attempt,
                ResumeOutcome.RENEWED_REVIEW_REQUIRED,
                f"{reason}: {RENEWED_REASON}",
                new_interrupt_id=renewed.id,
            )
            return SystemResume(result, renewed=(code[0], renewed))
        # A savepoint here, unless the caller rolls back on a lost race: the sweep goes on
        # with its batch after one.
        with session.begin_nested() if isolated else nullcontext():
            accepted = accept(session, contract, submitted, attempt, interrupt, run)
            return SystemResume(accepted.result, released=accepted.released)
    except Undecided as undecided:
        raise SystemDeferred(undecided.reason) from None
    except LostRace as lost:
        if not isolated:
            raise
        return SystemResume(
            attempts.record_in(session, attempt, ResumeOutcome.STALE, f"{reason}: {lost}")
        )
    except Refusal as refusal:
        return SystemResume(
            attempts.record_in(session, attempt, refusal.outcome, f"{reason}: {refusal.reason}")
        )
