"""What each resume outcome means over HTTP: a status code for programs, words for people."""

from __future__ import annotations

import logging

from models.contracts import ResumeResult
from models.enums import ResumeOutcome

log = logging.getLogger(__name__)

STATUS = {
    ResumeOutcome.ACCEPTED: 202,
    ResumeOutcome.DUPLICATE: 200,
    ResumeOutcome.MALFORMED: 422,
    ResumeOutcome.UNAUTHENTICATED: 401,
    ResumeOutcome.STALE: 409,
    ResumeOutcome.EXPIRED: 410,
    ResumeOutcome.DENIED: 403,
    ResumeOutcome.INVALID_INPUT: 422,
    ResumeOutcome.RENEWED_REVIEW_REQUIRED: 409,
    # This process loads no flow that registers the interrupt's schema: a deployment problem
    # (the answer may be accepted by a server that has the flow), not the caller's.
    ResumeOutcome.UNKNOWN_SCHEMA: 503,
    # The caller's idempotency key was used for another contract: the caller's to fix.
    ResumeOutcome.KEY_REUSED: 422,
    # An event kept for a run that does not wait on it yet.
    ResumeOutcome.KEPT: 202,
}

HEADLINE = {
    ResumeOutcome.ACCEPTED: "Accepted: your answer was recorded and the run continues.",
    ResumeOutcome.KEPT: "Kept: the run does not wait on this event yet; it will take it when "
    "it asks.",
    ResumeOutcome.DUPLICATE: "Duplicate: this answer was already submitted; nothing happened "
    "a second time.",
    ResumeOutcome.MALFORMED: "Not understood: the answer could not be read as a resume.",
    ResumeOutcome.UNAUTHENTICATED: "Not signed in: your credential was not accepted.",
    ResumeOutcome.STALE: "Stale: this interrupt is no longer waiting for this answer.",
    ResumeOutcome.EXPIRED: "Expired: the time to answer this interrupt is over.",
    ResumeOutcome.DENIED: "Denied: you may not answer this interrupt.",
    ResumeOutcome.INVALID_INPUT: "Invalid input: the form's values do not fit what was asked.",
    ResumeOutcome.RENEWED_REVIEW_REQUIRED: "Review again: the evidence changed while the run "
    "waited, so a new review is required.",
    ResumeOutcome.UNKNOWN_SCHEMA: "Cannot check the answer here: this server does not load the "
    "flow that defines the interrupt's input form. Nothing was changed.",
    ResumeOutcome.KEY_REUSED: "Key reused: this idempotency key was already used for another "
    "answer; nothing changed. Submit again with a new key.",
}

# renewed_review_required with no new interrupt: the flow's revalidation itself failed.
UNCONFIRMED = (
    "Not confirmed: the evidence could not be checked against current records, so your answer "
    "was not accepted. Nothing changed; try again later."
)


def status_of(outcome: ResumeOutcome) -> int:
    # An outcome added to the gateway later is at least a refusal, never a success.
    return STATUS.get(outcome, 409)


def headline_of(outcome: ResumeOutcome) -> str:
    return HEADLINE.get(outcome, f"Refused: {outcome.value}.")


def log_resume(result: ResumeResult, *, actor: object, via: str) -> None:
    """One line per answer the server took, beside uvicorn's access line (which names neither
    run nor outcome): outcome, run, interrupt, the actor as the contract names it (escaped by
    the log's filter; an unauthenticated one is only a claim) and the recorded attempt."""
    refused = "" if result.accepted else f": {result.reason}"
    log.info(
        "resume %s via %s: interrupt %s, actor %s, attempt %s%s",
        result.outcome.value,
        via,
        result.interrupt_id or "-",
        actor if isinstance(actor, str) else "-",
        result.attempt_id,
        refused,
        extra={"action": "resume", "run_id": result.run_id},
    )
