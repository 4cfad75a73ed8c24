"""Recording a resume attempt: every submission ends as one row, whatever its outcome.

The row keeps the outcome, the reason and the payload (a refused payload is kept as evidence,
credentials redacted, bounded). Idempotency keys belong to the authenticated actor and bind to
the payload they were first used with: a repeat answers from the original attempt. Used by the
gateway (``worker.gateway.submit``), events, answer links and chat callbacks.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from sqlalchemy.orm import Session

from models import attempts as attempt_store
from models.canonical import json_hash
from models.contracts import ResumeContract, ResumeResult
from models.db import transaction
from models.enums import ResumeOutcome
from models.tables import Actor, ResumeAttempt
from worker.gateway.actors import Credential, redact_shaped
from worker.present.safetext import escape_controls

log = logging.getLogger(__name__)
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
# What a contract decides: all of it but the window in which it may be submitted, so that a
# retry rebuilt with a later expires_at is still the same submission.
NOT_HASHED = frozenset({"expires_at"})


class Proof(Protocol):
    """Who answers, proven otherwise than by the actor's own credential: an answer link's
    token, a chat's signed callback (``worker.gateway.answer_links``, ``worker.ops.notify_slack``).

    ``verify`` is check 2 for such a submission: in the attempt's transaction, given the
    contract and the row of the actor it names (locked for share, as for a credential), it
    returns the actor the proof authenticates (None: unauthenticated) or raises
    ``worker.gateway.checks.Refusal``
    (an expired or narrower proof). ``via`` is recorded on the attempt; a ``single_use``
    proof's key answers every later use as a duplicate of its first.
    """

    via: str
    single_use: bool

    def verify(
        self, session: Session, actor: Actor | None, contract: ResumeContract
    ) -> Actor | None: ...


@dataclass
class Attempt:
    """One submission as it is recorded, filled in as the checks learn more of it (the ids it
    names, the authenticated actor, its key and the hash of its payload)."""

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


def payload_hash(contract: Mapping[str, Any]) -> str:
    """What an idempotency key binds to: the contract's decision, not its expiry."""
    return json_hash({k: v for k, v in contract.items() if k not in NOT_HASHED})


def last_resort(attempt: Attempt, exc: Exception) -> ResumeResult:
    """An error no check foresaw: recorded as a refusal named by the error's class."""
    log.error(
        "resume attempt failed unexpectedly (%s); recorded as a refusal",
        type(exc).__name__,
        exc_info=exc,
        extra={"action": "resume_error", "run_id": attempt.run_id},
    )
    outcome = ResumeOutcome.INVALID_INPUT if attempt.parsed else ResumeOutcome.MALFORMED
    reason = f"the submission could not be processed ({type(exc).__name__}); nothing changed"
    return record(attempt, outcome, reason, claim=False)


def repeat(session: Session, attempt: Attempt, original: ResumeAttempt) -> ResumeResult:
    """The actor used this key before: the same payload is a duplicate, another is refused."""
    first_hash = original.payload_hash
    if first_hash is None and isinstance(original.payload, dict):
        # Recorded before keys were bound to payloads: hash what was stored then.
        first_hash = payload_hash(original.payload)
    single_use = attempt.proof is not None and attempt.proof.single_use
    if first_hash == attempt.payload_hash or single_use:
        # A single-use proof (an answer link) decides once, whatever a later use submits.
        return record_in(
            session,
            attempt,
            ResumeOutcome.DUPLICATE,
            f"duplicate of attempt {original.id} ({original.outcome})",
            original=original,
        )
    return record_in(
        session,
        attempt,
        ResumeOutcome.KEY_REUSED,
        f"this idempotency key was used by attempt {original.id} ({original.outcome}) for "
        "another contract; submit this one with a new key",
        original=original,
    )


def record_in(
    session: Session,
    attempt: Attempt,
    outcome: ResumeOutcome,
    reason: str,
    *,
    original: ResumeAttempt | None = None,
    new_interrupt_id: str | None = None,
    claim: bool = True,
) -> ResumeResult:
    """Record the attempt in ``session``'s transaction (``record``: in a transaction of its own)."""
    values = attempt_values(attempt, outcome, reason, claim=claim)
    attempt_id = attempt_store.insert_attempt(session, **values)
    return recorded(
        attempt,
        attempt_id,
        outcome,
        values["reason"],
        original=original,
        new_interrupt_id=new_interrupt_id,
    )


def attempt_values(
    attempt: Attempt, outcome: ResumeOutcome, reason: str, *, claim: bool = True
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


def recorded(
    attempt: Attempt,
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


def record(
    attempt: Attempt, outcome: ResumeOutcome, reason: str, *, claim: bool = True
) -> ResumeResult:
    with transaction() as session:
        return record_in(session, attempt, outcome, reason, claim=claim)


def record_repeat(attempt: Attempt) -> ResumeResult:
    """After losing the race for the actor's key: answer from the attempt that won it."""
    with transaction() as session:
        original = (
            attempt_store.original_attempt(session, attempt.actor_id, attempt.key)
            if attempt.actor_id is not None and attempt.key is not None
            else None
        )
        if original is None:
            raise RuntimeError("idempotency key conflict without an original attempt")
        return repeat(session, attempt, original)


def _capped(reason: str) -> str:
    return reason if len(reason) <= MAX_REASON else reason[: MAX_REASON - 1] + "…"


def _redacted_id(value: str | None) -> str | None:
    return redact_shaped(value) if value is not None else None


def _stored_payload(attempt: Attempt, outcome: ResumeOutcome) -> Any:
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
