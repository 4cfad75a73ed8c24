"""What a step sees: its state and input, and the interrupt, effect and budget calls."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ValidationError

from models.contracts import evidence_hash
from models.db import transaction
from models.enums import Decision, ExpiryPolicy, InterruptKind
from models.errors import BudgetRejectedError, FlowDefinitionError
from worker.flows import Flow
from worker.schemas import BudgetGrant, json_schema_of, lookup, schema_id_of

if TYPE_CHECKING:
    from worker.effects import LedgerEntry

T = TypeVar("T")
# Interrupt names are stable across re-executions; they key the answer at a checkpoint.
MAX_INTERRUPT_NAME = 200


@dataclass(frozen=True)
class InterruptSpec:
    """Everything needed to record an interrupt; built by ``ctx.interrupt``."""

    name: str
    kind: InterruptKind
    reason: str
    schema_name: str
    schema_version: int
    json_schema: dict[str, Any]
    roles: list[str]
    scope: Any
    evidence: Any
    evidence_hash: str
    expires_in: float
    on_expiry: ExpiryPolicy
    escalation: dict[str, Any] | None = None
    default_input: dict[str, Any] | None = None
    separate_from_starter: bool = False


class Suspend(BaseException):
    """Control flow, not an error: the step stops here and the run waits for ``spec``.

    It derives from BaseException so that a step's ``except Exception`` cannot swallow it.
    """

    def __init__(self, spec: InterruptSpec) -> None:
        super().__init__(spec.name)
        self.spec = spec


@dataclass(frozen=True)
class Resume:
    """The accepted answer to an interrupt, returned by ``ctx.interrupt`` on re-execution."""

    interrupt_id: str
    decision: Decision
    input: BaseModel | None
    actor: str

    @property
    def approved(self) -> bool:
        return self.decision is Decision.APPROVED


@dataclass(frozen=True)
class ResolvedInterrupt:
    id: str
    name: str
    schema_name: str
    schema_version: int
    decision: str
    resume_input: dict[str, Any] | None
    resolved_by: str


def _seconds(value: float | timedelta) -> float:
    seconds = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if seconds <= 0:
        raise FlowDefinitionError(detail=f"expires_in must be positive, got {value!r}")
    return seconds


@dataclass
class StepContext:
    """One execution of one step. A step may run again: keep effects in ``ctx.effect``."""

    run_id: str
    flow: Flow
    step: str
    input: Any
    state: dict[str, Any]
    epoch: int
    checkpoint_id: str
    checkpoint_seq: int
    started_by: str | None
    budget_allowance: float | None
    budget_consumed: float
    resolved: Mapping[str, ResolvedInterrupt]
    # The effect ledger of the run, loaded on first use (None until then).
    effects: dict[str, LedgerEntry] | None
    resuming: bool = False
    applied_effects: list[str] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)

    def ledger(self) -> dict[str, LedgerEntry]:
        """The run's effect ledger, read once per execution when a step first needs it."""
        if self.effects is None:
            from worker.effects import load_ledger

            with transaction(readonly=True) as session:
                self.effects = load_ledger(session, self.run_id)
        return self.effects

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def resume_value(self, name: str) -> Resume | None:
        """The accepted resume for interrupt ``name`` at this checkpoint, if any."""
        found = self.resolved.get(name)
        if found is None:
            return None
        value: BaseModel | None = None
        model = lookup(found.schema_name, found.schema_version)
        # A rejection may carry input too (a reason, say); it was validated like any other.
        if model is not None and (found.decision == Decision.APPROVED.value or found.resume_input):
            try:
                value = model.model_validate(found.resume_input or {})
            except ValidationError:
                value = None
        return Resume(found.id, Decision(found.decision), value, found.resolved_by)

    def interrupt(
        self,
        name: str,
        *,
        kind: InterruptKind | str,
        input: type[BaseModel],
        authority: list[str],
        expires_in: float | timedelta,
        scope: Any = None,
        evidence: Any = None,
        on_expiry: ExpiryPolicy | str = ExpiryPolicy.EXPIRE,
        reason: str = "",
        escalate_to: list[str] | None = None,
        escalation_expires_in: float | timedelta | None = None,
        max_escalations: int = 1,
        default: BaseModel | dict[str, Any] | None = None,
        separate_from_starter: bool = False,
    ) -> Resume:
        """Stop the run until an authorized responder releases ``name``; then return the answer."""
        resumed = self.resume_value(name)
        if resumed is not None:
            return resumed
        raise Suspend(
            build_spec(
                name,
                kind=kind,
                model=input,
                authority=authority,
                expires_in=expires_in,
                scope=scope,
                evidence=evidence,
                on_expiry=on_expiry,
                reason=reason,
                escalate_to=escalate_to,
                escalation_expires_in=escalation_expires_in,
                max_escalations=max_escalations,
                default=default,
                separate_from_starter=separate_from_starter,
            )
        )

    def consume(self, units: float) -> None:
        """Spend ``units`` of the run's allowance; when it runs out, wait for a budget grant."""
        if units < 0:
            raise ValueError("budget units must not be negative")
        if self.budget_allowance is not None:
            grant = 1
            while self.budget_consumed + units > self.budget_allowance:
                name = f"budget.{grant}"
                answer = self.resume_value(name)
                if answer is None:
                    raise Suspend(
                        build_spec(
                            name,
                            kind=InterruptKind.BUDGET,
                            model=BudgetGrant,
                            authority=list(self.flow.operator_roles),
                            expires_in=7 * 24 * 3600,
                            evidence={
                                "allowance": self.budget_allowance,
                                "consumed": self.budget_consumed,
                                "requested": units,
                            },
                            reason=f"budget exhausted in step {self.step}",
                        )
                    )
                if not answer.approved:
                    raise BudgetRejectedError(run_id=self.run_id)
                grant += 1
        self.budget_consumed += units

    def effect(
        self,
        name: str,
        fn: Callable[..., T],
        *args: Any,
        reconcile: Callable[[str], Any] | None = None,
        key: str | None = None,
        **kwargs: Any,
    ) -> T:
        """Run an external side effect at most once for this run (see ``worker.effects``)."""
        from worker.effects import perform

        result: T = perform(self, name, fn, args, kwargs, reconcile=reconcile, key=key)
        return result


def build_spec(
    name: str,
    *,
    kind: InterruptKind | str,
    model: type[BaseModel],
    authority: list[str],
    expires_in: float | timedelta,
    scope: Any = None,
    evidence: Any = None,
    on_expiry: ExpiryPolicy | str = ExpiryPolicy.EXPIRE,
    reason: str = "",
    escalate_to: list[str] | None = None,
    escalation_expires_in: float | timedelta | None = None,
    max_escalations: int = 1,
    default: BaseModel | dict[str, Any] | None = None,
    separate_from_starter: bool = False,
) -> InterruptSpec:
    """Check an interrupt declaration and turn it into a spec (errors here are the flow's bugs)."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= MAX_INTERRUPT_NAME
        or not name.isprintable()
    ):
        raise FlowDefinitionError(
            detail=f"interrupt name {name!r} must be 1 to {MAX_INTERRUPT_NAME} printable characters"
        )
    try:
        kind = InterruptKind(kind)
        policy = ExpiryPolicy(on_expiry)
    except ValueError as exc:
        raise FlowDefinitionError(detail=f"interrupt {name!r}: {exc}") from None
    # A bare string is iterable too: "approver" must not become the roles a, e, o, p, r, v.
    if (
        isinstance(authority, str)
        or not authority
        or not all(isinstance(r, str) and r for r in authority)
    ):
        raise FlowDefinitionError(detail=f"interrupt {name!r}: authority needs a list of roles")
    for what, value in (("scope", scope), ("evidence", evidence)):
        try:
            json.dumps(value, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise FlowDefinitionError(
                detail=f"interrupt {name!r}: {what} is not JSON: {exc}"
            ) from None
    schema_name, schema_version = schema_id_of(model)
    escalation = None
    if policy is ExpiryPolicy.ESCALATE:
        if not escalate_to:
            raise FlowDefinitionError(detail=f"interrupt {name!r}: escalate needs escalate_to")
        escalation = {
            "roles": list(escalate_to),
            "expires_in": _seconds(escalation_expires_in or expires_in),
            "max": max_escalations,
        }
    default_input = None
    if policy is ExpiryPolicy.DEFAULT:
        if default is None:
            raise FlowDefinitionError(detail=f"interrupt {name!r}: default policy needs default=")
        data = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
        try:
            default_input = model.model_validate(data).model_dump(mode="json")
        except ValidationError as exc:
            raise FlowDefinitionError(
                detail=f"interrupt {name!r}: default input is invalid: {exc.errors()[0]['msg']}"
            ) from None
    return InterruptSpec(
        name=name,
        kind=kind,
        reason=reason,
        schema_name=schema_name,
        schema_version=schema_version,
        json_schema=json_schema_of(model),
        roles=list(authority),
        scope=scope,
        evidence=evidence,
        evidence_hash=evidence_hash(evidence),
        expires_in=_seconds(expires_in),
        on_expiry=policy,
        escalation=escalation,
        default_input=default_input,
        separate_from_starter=separate_from_starter,
    )
