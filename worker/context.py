"""What a step sees: its state and input, and the interrupt, effect and budget calls."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar, Unpack

from pydantic import BaseModel, ValidationError

from models import effects as ledger_store
from models.contracts import InterruptDecl
from models.db import transaction
from models.effects import LedgerEntry, Outcome
from models.enums import Decision, InterruptKind
from models.errors import AnswerUnreadableError, BudgetRejectedError, FlowDefinitionError
from models.settings import DEFAULT_LEASE_SECONDS
from worker.declarations import InterruptArgs, Suspend, declare
from worker.effects import perform
from worker.flows import Flow
from worker.schemas import BudgetGrant, lookup, schema_id_of

T = TypeVar("T")
BUDGET_EXPIRES_IN = 7 * 24 * 3600


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
    # Carried from an older flow version when the run migrated (``worker.migration``).
    carried: bool = False


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
    # The step's lease: renewed to this length right before an effect's function is called.
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    applied_effects: list[str] = field(default_factory=list)
    pending_outcomes: list[Outcome] = field(default_factory=list)
    counters: dict[str, int] = field(default_factory=dict)
    # The wait this execution asked for, once it asked: a step that catches the signal
    # (a bare ``except:``, a ``return`` in ``finally``) must not go on as if it were answered.
    suspended: Suspend | None = None
    # The interrupt names this execution asked (answered or not): an answer releases one ask.
    asked: set[str] = field(default_factory=set)
    # A mistake of the step's own that fails it for good even if the step catches it.
    mistake: FlowDefinitionError | None = None

    def ledger(self) -> dict[str, LedgerEntry]:
        """The run's effect ledger, read once per execution when a step first needs it."""
        if self.effects is None:
            with transaction(readonly=True) as session:
                self.effects = ledger_store.load_ledger(session, self.run_id)
        return self.effects

    def count(self, name: str, by: int = 1) -> None:
        self.counters[name] = self.counters.get(name, 0) + by

    def resume_value(self, name: str) -> Resume | None:
        """The accepted resume for interrupt ``name`` at this checkpoint, if any."""
        found = self.resolved.get(name)
        if found is None:
            return None
        value: BaseModel | None = None
        # A rejection may carry input too (a reason, say); it was validated like any other.
        if found.decision == Decision.APPROVED.value or found.resume_input:
            value = _answer(found)
        return Resume(found.id, Decision(found.decision), value, found.resolved_by)

    def interrupt(self, name: str, **declaration: Unpack[InterruptArgs]) -> Resume:
        """Stop the run until an authorized responder releases ``name``; then return the answer.

        The declaration takes ``kind``, ``input`` (the schema), ``authority``, ``expires_in``
        and the optional fields of ``InterruptArgs``.
        """
        if not isinstance(name, str):
            # (Looked up among the answers first, a list would raise TypeError, retried as if
            # transient.)
            declare(name, **declaration)  # refuses it: FlowDefinitionError, for good
        if name in self.asked:
            # The first answer would come back for every later ask: one answer, many approvals.
            self.mistake = FlowDefinitionError(
                detail=f"step {self.step!r} asks interrupt {name!r} twice in one execution, "
                f"and its one answer would answer every ask: give each ask its own name "
                f"(e.g. f'{name}-{{item.id}}')"
            )
            raise self.mistake
        self.asked.add(name)
        found = self.resolved.get(name)
        # An answer binds to its interrupt's name and schema: a version that asks with another
        # schema asks again.
        if found is not None and (found.schema_name, found.schema_version) == schema_id_of(
            declaration["input"]
        ):
            resumed = self.resume_value(name)
            if resumed is not None:
                return resumed
        decl = declare(name, **declaration)
        renews = found if found is not None and found.carried else self._carried_answer()
        if renews is not None:
            # A newer version does not ask what was answered: a renewed review, the old
            # answer kept.
            decl = decl.model_copy(
                update={"supersedes": renews.id, "previous_input": renews.resume_input}
            )
        raise self._suspend(decl)

    def _suspend(self, decl: InterruptDecl) -> Suspend:
        if self.mistake is not None:
            # The step caught its own mistake and asked for a wait: it fails all the same.
            raise self.mistake
        self.suspended = Suspend(decl)
        return self.suspended

    def _carried_answer(self) -> ResolvedInterrupt | None:
        return next((r for r in self.resolved.values() if r.carried), None)

    def consume(self, units: float) -> None:
        """Spend ``units`` of the run's allowance; when it runs out, wait for a budget grant."""
        # NaN passes every comparison false: the allowance would never run out again.
        if (
            not isinstance(units, numbers.Real)
            or isinstance(units, bool)
            or not math.isfinite(units)
            or units < 0
        ):
            raise ValueError(f"budget units must be a finite number, not negative, got {units!r}")
        if self.budget_allowance is not None:
            grant = 1
            while self.budget_consumed + units > self.budget_allowance:
                name = f"budget.{grant}"
                answer = self.resume_value(name)
                if answer is None:
                    raise self._suspend(
                        declare(
                            name,
                            kind=InterruptKind.BUDGET,
                            input=BudgetGrant,
                            authority=list(self.flow.operator_roles),
                            expires_in=BUDGET_EXPIRES_IN,
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
        pass_fencing_token: bool = True,
        **kwargs: Any,
    ) -> T:
        """Run an external side effect at most once for this run (see ``worker.effects``).

        ``fn`` is called as ``fn(*args, idempotency_key=..., fencing_token=epoch, **kwargs)``;
        ``pass_fencing_token=False`` leaves the token out for a callee that does not take it.
        """
        if self.mistake is not None:
            # The step caught its own mistake and went on: nothing more happens.
            raise self.mistake
        if self.suspended is not None:
            # The step caught its wait's signal and went on: nothing happens before the answer.
            raise self.suspended
        result: T = perform(
            self,
            name,
            fn,
            args,
            kwargs,
            reconcile=reconcile,
            key=key,
            fencing_token=pass_fencing_token,
        )
        return result


def _answer(found: ResolvedInterrupt) -> BaseModel:
    """The accepted input of ``found``, read with this worker's model of its schema.

    The gateway validated it against the model the interrupt was asked with. A worker whose
    code registers no such schema, or another model under the same id, cannot read it: the
    step fails (and is retried, by this worker or one with the right code) rather than go on
    with no input, which a step may well read as "no limit".
    """
    schema = f"{found.schema_name}.v{found.schema_version}"
    model = lookup(found.schema_name, found.schema_version)
    if model is None:
        raise AnswerUnreadableError(
            name=found.name, schema=schema, detail="that schema is not registered here"
        )
    try:
        return model.model_validate(found.resume_input or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "input"
        raise AnswerUnreadableError(
            name=found.name,
            schema=schema,
            detail=f"{exc.error_count()} error(s), first at {where}: {first['msg']}",
        ) from None
