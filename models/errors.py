"""Every error interlude raises. Each docstring is the error's default message."""

from __future__ import annotations

from typing import Any


class InterludeError(Exception):
    """interlude failed."""

    def __init__(self, message: str | None = None, **fields: Any) -> None:
        self.fields = fields
        for key, value in fields.items():
            setattr(self, key, value)
        text = message or (self.__doc__ or "").strip().format(**fields)
        # One line: callers print errors as they are.
        super().__init__(" ".join(text.split()))


class ConfigurationError(InterludeError):
    """configuration is invalid: {detail}"""


class UnknownFlowError(InterludeError):
    """unknown flow {flow!r}; registered flows: {known}"""


class UnknownStepError(InterludeError):
    """flow {flow!r} has no step {step!r}"""


class FlowDefinitionError(InterludeError):
    """flow definition is invalid: {detail}"""


class UnknownNotifierError(InterludeError):
    """flow {flow!r} v{version} has no notifier {notifier!r} here; its notifiers: {known}"""


class NotifierFailedError(InterludeError):
    """notifier {notifier} failed for interrupt {interrupt_id} (attempt {attempt}): {error}"""

    # Raised by the notify task once its failure is logged (and its retry, if any, published),
    # so that Flower and the worker's log see the task retry or fail.


class AnswerUnreadableError(InterludeError):
    """the accepted answer to interrupt {name!r} does not fit schema {schema} in this worker's
    code ({detail}): deploy the code the interrupt was asked with, or ask under a new schema
    version"""


class FlowVersionError(InterludeError):
    """run {run_id} needs flow {flow!r} version {version}; this worker has {available}"""


class InvalidInputError(InterludeError):
    """invalid input: {detail}"""


class AmbiguousIdError(InvalidInputError):
    """{kind} id prefix {prefix!r} is ambiguous; it starts {candidates}"""


class RunNotFoundError(InterludeError):
    """no run {run_id}"""


class InterruptNotFoundError(InterludeError):
    """no interrupt {interrupt_id}"""


class ActorError(InterludeError):
    """actor {actor_id}: {detail}"""


class ActorNotFoundError(ActorError):
    """actor {actor_id}: no such actor"""


class ActorExistsError(ActorError):
    """actor {actor_id}: already exists"""


class OperatorRefusedError(InterludeError):
    """{action} of run {run_id} refused ({outcome}): {reason}; nothing changed"""


class OperatorUnauthenticatedError(OperatorRefusedError):
    """{action} of run {run_id} refused (unauthenticated): {reason}; nothing changed"""


class OperatorDeniedError(OperatorRefusedError):
    """{action} of run {run_id} refused (denied): {reason}; nothing changed"""


class WaitTimeoutError(InterludeError):
    """run {run_id} is still {state} after {timeout:g}s"""


class InvalidTransitionError(InterludeError):
    """run {run_id}: cannot {trigger} from {found}"""


class StaleStateError(InterludeError):
    """run {run_id}: expected {expected}, found {found}"""


class FencedError(InterludeError):
    """run {run_id}: lease epoch {epoch} was superseded; this worker no longer owns the run"""


class LeaseMarginError(InterludeError):
    """effect {name!r} of run {run_id} not called: the lease had {left:.1f}s left, not more
    than the {margin:.1f}s margin"""


class EffectError(InterludeError):
    """effect {name!r} of run {run_id}: {detail}"""


class StepFailedError(InterludeError):
    """run {run_id}: step {flow}:{step} failed (attempt {attempt}): {error}"""

    # Raised by the Celery task once the failure is committed, so that Flower and the worker's
    # log see the task fail; the run's own record of the failure is the truth.


class BudgetRejectedError(InterludeError):
    """run {run_id}: budget exhausted and more allowance was refused"""


class InvalidToolCallError(InterludeError):
    """the proposed call of tool {tool!r} does not fit its arguments' model: {detail}"""

    # The agent's mistake, not the flow's: a step may catch it and tell its model.


class StartRefusedError(InterludeError):
    """start of a run of flow {flow} refused ({outcome}): {reason}; nothing started"""


class LinkError(InterludeError):
    """answer links: {detail}"""


class ContactError(InterludeError):
    """contact {address!r}: {detail}"""
