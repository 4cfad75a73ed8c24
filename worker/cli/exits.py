"""Exit statuses of the ``interlude`` command, and which error or resume outcome maps to which."""

from __future__ import annotations

from models.enums import ResumeOutcome, RunState
from models.errors import (
    ActorError,
    ActorExistsError,
    ActorNotFoundError,
    InterludeError,
    InterruptNotFoundError,
    InvalidInputError,
    InvalidTransitionError,
    OperatorDeniedError,
    OperatorUnauthenticatedError,
    RunNotFoundError,
    StaleStateError,
    UnknownFlowError,
)

OK = 0
FAILURE = 1
BAD_INPUT = 2  # also what argparse uses for a bad command line
NOT_FOUND = 3
CONFLICT = 4  # the run's state does not allow it (e.g. cancelling a finished run)
NOT_CONFIRMED = 5
# ``runs wait`` and ``runs show --follow``: how the run finished (succeeded is 0).
RUN_EXIT: dict[RunState, int] = {
    RunState.SUCCEEDED: OK,
    RunState.FAILED: 20,
    RunState.CANCELLED: 21,
    RunState.EXPIRED: 22,
}
WAIT_TIMED_OUT = 23
INTERRUPTED = 130

# A duplicate exits with the status of the attempt it repeats (see resume_exit).
RESUME_EXIT: dict[ResumeOutcome, int] = {
    ResumeOutcome.ACCEPTED: OK,
    ResumeOutcome.DUPLICATE: OK,
    ResumeOutcome.MALFORMED: 10,
    ResumeOutcome.UNAUTHENTICATED: 11,
    ResumeOutcome.STALE: 12,
    ResumeOutcome.EXPIRED: 13,
    ResumeOutcome.DENIED: 14,
    ResumeOutcome.INVALID_INPUT: 15,
    ResumeOutcome.RENEWED_REVIEW_REQUIRED: 16,
    ResumeOutcome.UNKNOWN_SCHEMA: 17,
    ResumeOutcome.KEY_REUSED: 18,
    # An event kept until its run asks for it: received, as an accepted resume is.
    ResumeOutcome.KEPT: OK,
}
# A refused cancel, pause or retry exits as a resume refused for the same reason.
OPERATOR_UNAUTHENTICATED = RESUME_EXIT[ResumeOutcome.UNAUTHENTICATED]
OPERATOR_DENIED = RESUME_EXIT[ResumeOutcome.DENIED]
OPERATOR_EXITS = (OPERATOR_UNAUTHENTICATED, OPERATOR_DENIED)


def resume_exit(outcome: ResumeOutcome, original: ResumeOutcome | None = None) -> int:
    """The exit status of a resume: a duplicate's is the status of the attempt it repeats,
    so a resubmitted refusal never exits 0."""
    if outcome is ResumeOutcome.DUPLICATE and original is not None:
        return RESUME_EXIT[original] if original is not ResumeOutcome.DUPLICATE else OK
    return RESUME_EXIT[outcome]


EPILOG = f"""exit statuses:
  {OK:<3} success, including a duplicate of an earlier accepted resume (a duplicate of a
      refused one exits with that refusal's status)
  {FAILURE:<3} failure (configuration, database, a part that is not available)
  {BAD_INPUT:<3} bad input: a bad argument, bad JSON, an invalid flow input
  {NOT_FOUND:<3} not found: no such run, interrupt, flow or actor
  {CONFLICT:<3} conflict: the run's state does not allow it, or the actor already exists
  {NOT_CONFIRMED:<3} not confirmed (answer no, or no terminal and no --yes)
  20  runs wait: the run failed (21 cancelled, 22 expired, 23 still going at --timeout)
""" + "".join(
    f"  {status:<3} resume refused: {outcome.value}"
    + (" (also runs cancel, pause, retry)" if status in OPERATOR_EXITS else "")
    + "\n"
    for outcome, status in RESUME_EXIT.items()
    if status != OK
)


class CliError(Exception):
    """A failure the command reports as one line on stderr, with its exit status."""

    def __init__(self, message: str, status: int = BAD_INPUT) -> None:
        super().__init__(message)
        self.status = status


def status_of(error: InterludeError) -> int:
    """The exit status for an error raised by the Python API."""
    not_found = RunNotFoundError | InterruptNotFoundError | UnknownFlowError | ActorNotFoundError
    if isinstance(error, OperatorUnauthenticatedError):
        return OPERATOR_UNAUTHENTICATED
    if isinstance(error, OperatorDeniedError):
        return OPERATOR_DENIED
    if isinstance(error, not_found):
        return NOT_FOUND
    if isinstance(error, InvalidTransitionError | StaleStateError | ActorExistsError):
        return CONFLICT
    if isinstance(error, InvalidInputError | ActorError):
        return BAD_INPUT
    return FAILURE
