"""What a step sees: its state and input, and the interrupt, effect and budget calls."""

from __future__ import annotations

import math
import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

from pydantic import BaseModel, ValidationError

from models import effects as effect_store
from models.contracts import InterruptDecl, json_copy
from models.db import transaction
from models.effects import LedgerEntry, Outcome
from models.enums import Decision, InterruptKind
from models.errors import (
    AnswerUnreadableError,
    BudgetRejectedError,
    EffectError,
    FlowDefinitionError,
    InvalidToolCallError,
)
from models.settings import DEFAULT_LEASE_SECONDS
from models.storable import unstorable_where
from worker.engine.answer_binding import ResolvedInterrupt, mismatch
from worker.engine.effects import perform
from worker.flows.declarations import InterruptArgs, Suspend, declare
from worker.flows.flow import Flow
from worker.flows.schemas import BudgetGrant, lookup
from worker.flows.toolcalls import ReviewedCall, arguments_hash, evidence_of

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
    # The step's lease: renewed to this length before an effect's function is called, unless
    # less than a third of it has passed since it was claimed or last renewed.
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # When the lease ends, as the claim or this execution's last renewal wrote it.
    lease_expires_at: datetime | None = None
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
    # Values computed once at this checkpoint (``remember``), and whether this execution
    # added any (then they are kept with its wait).
    remembered: dict[str, Any] = field(default_factory=dict)
    remembered_more: bool = False
    # Answers this execution found no longer binding, and why, by answer id: the waits it
    # asks for supersede them (renewed reviews where the step acts).
    renewals: dict[str, dict[str, Any]] = field(default_factory=dict)
    # Ask groups whose need this execution found met: their open asks close with its commit.
    groups_met: list[str] = field(default_factory=list)
    # When this execution started (kept with the checkpoint it commits: the step's timing).
    started_at: datetime | None = None

    def ledger(self) -> dict[str, LedgerEntry]:
        """The run's effect ledger, read once per execution when a step first needs it."""
        if self.effects is None:
            with transaction(readonly=True) as session:
                self.effects = effect_store.load_ledger(session, self.run_id)
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
        and the optional fields of ``InterruptArgs``. An answer is returned only for what it
        was given for: when this execution declares other evidence or scope (a proposal
        computed again, a record that changed) or the flow's policy no longer honours it,
        the run waits on a renewed review instead. Keep what must not change between the
        ask and the act in ``remember``.
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
        decl, answer = self._bound_answer(name, declaration)
        if answer is not None:
            return answer
        if decl.supersedes is None:
            renews = self._carried_answer()
            if renews is not None:
                # A newer version does not ask what was answered: a renewed review, the old
                # answer kept.
                decl = decl.model_copy(
                    update={"supersedes": renews.id, "previous_input": renews.resume_input}
                )
        raise self._suspend(decl)

    def ask_all(
        self,
        asks: Mapping[str, Mapping[str, Any]],
        *,
        need: str | int = "all",
        group: str | None = None,
    ) -> dict[str, Resume]:
        """Ask several interrupts at once; return once ``need`` of them are answered.

        ``asks`` maps each interrupt's name to its declaration (as ``interrupt`` takes it:
        its own kind, schema, authority, evidence, scope, deadline and expiry policy); each
        is answered by its own contract. ``need`` is ``"all"``, ``"any"`` or a number k.
        Returns the answers by name (those given: at least ``need``); when the need is met,
        the asks still open are closed as superseded. Each answer binds where the step acts,
        as ``interrupt``'s does. ``group`` names the group (default: its asks' names).
        """
        names = list(asks)
        count = _need(need, len(names))
        group_name = group if group is not None else "+".join(names)
        if not names or not isinstance(group_name, str) or not 0 < len(group_name) <= 200:
            raise FlowDefinitionError(
                detail=f"step {self.step!r}: ask_all needs asks, and a group name of at most "
                f"200 characters (group=...), got {group_name!r}"
            )
        answers: dict[str, Resume] = {}
        open_asks: list[InterruptDecl] = []
        for name in names:
            if not isinstance(name, str) or name in self.asked:
                self.mistake = FlowDefinitionError(
                    detail=f"step {self.step!r}: ask {name!r} of group {group_name!r} is asked "
                    "twice in one execution (or is not a name)"
                )
                raise self.mistake
            self.asked.add(name)
            decl, answer = self._bound_answer(name, dict(asks[name]))  # type: ignore[arg-type]
            if answer is not None:
                answers[name] = answer
            else:
                open_asks.append(
                    decl.model_copy(update={"ask_group": group_name, "group_need": count})
                )
        if len(answers) >= count:
            if open_asks:
                self.groups_met.append(group_name)
            return answers
        raise self._suspend(open_asks[0], tuple(open_asks[1:]))

    def _bound_answer(
        self, name: str, declaration: InterruptArgs
    ) -> tuple[InterruptDecl, Resume | None]:
        """The declaration of ``name`` and its answer, if one binds to it; a declaration that
        supersedes an answer that does not bind (a renewed review) otherwise."""
        decl = declare(name, **declaration)
        policy = self.flow.policy_for(name)
        if policy.version is not None:
            decl = decl.model_copy(update={"policy_version": policy.version})
        found = self.resolved.get(name)
        if found is None:
            return decl, None
        # An answer binds to its interrupt's name and schema (a version that asks with
        # another schema asks again), and to the evidence, scope and policy it was given
        # for: compared here, where the step acts.
        same_schema = (found.schema_name, found.schema_version) == (
            decl.schema_name,
            decl.schema_version,
        )
        differs = mismatch(found, decl, policy)
        if same_schema and differs is None:
            resumed = self.resume_value(name)
            assert resumed is not None  # (found is an answer)
            return decl, resumed
        # A renewed review: the new interrupt supersedes the answer, its input kept.
        self.renewals[found.id] = {
            "name": name,
            **(differs.detail(found.id) if differs else {"answer": found.id}),
            **({} if same_schema else {"schema_changed": True}),
        }
        renewed = decl.model_copy(
            update={"supersedes": found.id, "previous_input": found.resume_input}
        )
        return renewed, None

    def event_ask(
        self, name: str, *, expires_in: float | timedelta, **declaration: Any
    ) -> dict[str, Any]:
        """The declaration of a wait for event ``name`` (declared with ``flow.event``), for
        ``ask_all`` (wait for any of several events: ``need="any"``)."""
        event = self.flow.events.get(name)
        if event is None:
            known = ", ".join(sorted(self.flow.events)) or "none"
            raise FlowDefinitionError(
                detail=f"step {self.step!r} waits for event {name!r}, which flow "
                f"{self.flow.name!r} does not declare (its events: {known}): declare it with "
                f"flow.event({name!r}, input=..., authority=...)"
            )
        return {
            "kind": InterruptKind.EVENT,
            "input": event.input,
            "authority": list(event.roles),
            "expires_in": expires_in,
            "reason": declaration.pop("reason", f"waiting for event {name}"),
            **declaration,
        }

    def wait_for_event(
        self, name: str, *, expires_in: float | timedelta, **declaration: Any
    ) -> Resume:
        """Wait for event ``name``; its payload (validated) comes back as the answer's input.

        An event sent before the run asks was kept: it answers at once, without a wait that
        holds anything.
        """
        return self.interrupt(name, **self.event_ask(name, expires_in=expires_in, **declaration))

    def remember(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)``, computed once at this checkpoint and kept with it.

        On the first execution ``fn`` is called and its result (JSON) is kept with the step's
        checkpoint when the run waits; later executions of the step there (after the answer)
        return the kept value without calling ``fn``. For a model's proposal or a read that
        must not change between the ask and the act. Not for side effects: those go through
        ``ctx.effect``, which also records that they happened.
        """
        if not isinstance(name, str) or not name:
            raise FlowDefinitionError(
                detail=f"remember needs a name (a non-empty str), got {name!r}"
            )
        if name in self.remembered:
            kept: T = self.remembered[name]
            return kept
        if self.mistake is not None:
            raise self.mistake
        if self.suspended is not None:
            raise self.suspended
        value = fn(*args, **kwargs)
        try:
            stored = json_copy(value)
        except (TypeError, ValueError) as exc:
            raise FlowDefinitionError(
                detail=f"step {self.step!r}: remembered value {name!r} is not JSON ({exc}); "
                "return JSON (for a pydantic model, .model_dump(mode='json'))"
            ) from None
        where = unstorable_where(stored)
        if where is not None:
            raise FlowDefinitionError(
                detail=f"step {self.step!r}: remembered value {name!r} holds NUL or unpaired "
                f"surrogate characters{where}"
            )
        self.remembered[name] = stored
        self.remembered_more = True
        # The JSON copy, on this execution as on the next: the step sees one value.
        result: T = stored
        return result

    def review_call(
        self,
        tool: str,
        args: BaseModel | Mapping[str, Any],
        *,
        expires_in: float | timedelta,
        name: str | None = None,
        evidence: Any = None,
        **declaration: Any,
    ) -> ReviewedCall:
        """Stop the run until a responder reviews a proposed call of ``tool``; the verdict.

        The responder approves the call, edits its arguments (authorized again for the
        edited call, by the tool's authority), or rejects it with a message for the agent.
        ``name`` (default: the tool's name) names the interrupt; ``evidence`` adds context
        shown beside the call. Execute an approved call with
        ``ctx.effect(name, fn, reviewed=call, **call.arguments)``.
        """
        spec = self.flow.tools.get(tool)
        if spec is None:
            known = ", ".join(sorted(self.flow.tools)) or "none"
            raise FlowDefinitionError(
                detail=f"step {self.step!r} reviews a call of {tool!r}, which flow "
                f"{self.flow.name!r} does not declare (its tools: {known}): declare it with "
                f"flow.tool({tool!r}, args=..., authority=...)"
            )
        try:
            data = args.model_dump(mode="json") if isinstance(args, BaseModel) else args
            proposed = spec.args.model_validate(data)
        except ValidationError as exc:
            # The agent's call, not the flow's: the step may tell its model and ask again.
            raise InvalidToolCallError(tool=tool, detail=_first_error(exc)) from None
        proposal: dict[str, Any] = proposed.model_dump(mode="json")
        resume = self.interrupt(
            name if name is not None else tool,
            kind=declaration.pop("kind", InterruptKind.APPROVAL),
            input=spec.answer,
            authority=spec.roles_for(proposed),
            expires_in=expires_in,
            evidence=evidence_of(tool, proposal, evidence),
            **declaration,
        )
        answer = resume.input
        message = str(getattr(answer, "message", "") or "")
        approved_args = getattr(answer, "args", None)
        if not resume.approved:
            return ReviewedCall(
                tool, resume.interrupt_id, False, proposed, proposed, False, message, resume.actor
            )
        chosen = approved_args if isinstance(approved_args, BaseModel) else proposed
        edited = arguments_hash(chosen.model_dump(mode="json")) != arguments_hash(proposal)
        return ReviewedCall(
            tool, resume.interrupt_id, True, chosen, proposed, edited, message, resume.actor
        )

    def _suspend(self, decl: InterruptDecl, more: tuple[InterruptDecl, ...] = ()) -> Suspend:
        if self.mistake is not None:
            # The step caught its own mistake and asked for a wait: it fails all the same.
            raise self.mistake
        self.suspended = Suspend(decl, more)
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
        reviewed: ReviewedCall | None = None,
        **kwargs: Any,
    ) -> T:
        """Run an external side effect at most once for this run (see ``worker.engine.effects``).

        ``fn`` is called as ``fn(*args, idempotency_key=..., fencing_token=epoch, **kwargs)``;
        ``pass_fencing_token=False`` leaves the token out for a callee that does not take it.
        ``reviewed``: the reviewed call this effect executes; its keyword arguments must be
        exactly the approved ones (else EffectError: the step fails for good).
        """
        if self.mistake is not None:
            # The step caught its own mistake and went on: nothing more happens.
            raise self.mistake
        if self.suspended is not None:
            # The step caught its wait's signal and went on: nothing happens before the answer.
            raise self.suspended
        if reviewed is not None:
            _check_reviewed(self.run_id, name, reviewed, args, kwargs)
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


def _need(need: str | int, asks: int) -> int:
    """How many answers release a group of ``asks``: all, any (one) or k."""
    if need == "all":
        return asks
    if need == "any":
        return 1
    if type(need) is int and 1 <= need <= asks:
        return need
    raise FlowDefinitionError(
        detail=f"ask_all: need must be 'all', 'any' or a whole number from 1 to {asks}, "
        f"got {need!r}"
    )


def _check_reviewed(
    run_id: str, name: str, call: ReviewedCall, args: tuple[Any, ...], kwargs: dict[str, Any]
) -> None:
    """The effect executes exactly the call that was approved, or nothing."""
    if not isinstance(call, ReviewedCall):
        raise EffectError(run_id=run_id, name=name, detail="reviewed= takes a ReviewedCall")
    if not call.approved:
        raise EffectError(
            run_id=run_id, name=name, detail=f"the call of {call.tool!r} was rejected"
        )
    if args:
        raise EffectError(
            run_id=run_id,
            name=name,
            detail="a reviewed call's arguments are passed by keyword (**call.arguments)",
        )
    try:
        same = arguments_hash(kwargs) == arguments_hash(call.arguments)
    except (TypeError, ValueError):
        same = False
    if not same:
        raise EffectError(
            run_id=run_id,
            name=name,
            detail=f"its arguments are not the call of {call.tool!r} that was approved "
            f"(interrupt {call.interrupt_id})",
        )


def _first_error(exc: ValidationError) -> str:
    first = exc.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "arguments"
    return f"{exc.error_count()} error(s), first at {where}: {first['msg']}"


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
