"""Check 9, acceptance: resolve the interrupt and move the run to ``resuming`` with the attempt
that accepted it, all or nothing; an ask of a group releases the run only with the answer that
meets the group's need.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from models import attempts as attempt_store
from models import events as event_store
from models import interrupts as interrupt_store
from models import runs as run_store
from models.contracts import ResumeContract, ResumeResult
from models.db import transaction, utcnow
from models.enums import Decision, EventKind, InterruptKind, ResumeOutcome, RunState
from models.errors import StaleStateError
from models.scope import Scope
from models.statements import Write
from models.tables import Interrupt, Run
from worker.flows.declarations import PAUSE_INTERRUPT
from worker.flows.migration import DEFERRED
from worker.flows.schemas import BudgetGrant
from worker.gateway import attempt_records as attempts
from worker.gateway.checks import Refusal

log = logging.getLogger(__name__)


class LostRace(Exception):
    """Control flow: acceptance lost a race after it began writing. Its transaction must roll
    back (no savepoint is paid for on the accepted path); the attempt is recorded as stale."""


def accept(
    session: Session,
    contract: ResumeContract,
    submitted: dict[str, Any],
    attempt: attempts.Attempt,
    interrupt: Interrupt,
    run: Run,
    *,
    revalidated: bool = True,
) -> Accepted:
    """Check 9: resolve the interrupt and move the run to ``resuming``, all or nothing.

    Without the flow's code here, check 8 is left to the worker that continues the run
    (``revalidation: deferred`` on the event). An ask of a group releases the run only with
    the answer that meets the group's need; the others are recorded and the run waits on.
    """
    if interrupt.ask_group is None:
        return release(session, contract, submitted, attempt, interrupt, run, revalidated)
    group = _group_progress(session, interrupt, run)
    if not group.met:
        return Accepted(_answer_in_group(session, contract, submitted, attempt, interrupt, group))
    accepted = release(session, contract, submitted, attempt, interrupt, run, revalidated)
    return Accepted(accepted.result, released=True, group=interrupt.ask_group)


def release(
    scope: Scope,
    contract: ResumeContract,
    submitted: dict[str, Any],
    attempt: attempts.Attempt,
    interrupt: Interrupt,
    run: Run,
    revalidated: bool,
    *,
    given: Write | None = None,
) -> Accepted:
    """Resolve the interrupt and move the run to ``resuming``, with the attempt, in one
    statement; ``given``: the query that statement is guarded on as well (an answer accepted
    at once: ``worker.gateway.at_once``). Raises ``LostRace`` if it wrote nothing."""
    now = utcnow()
    # Recorded under the authenticated id's normal form, not as the contract spells it.
    who = attempt.actor_id or contract.actor.id
    actor = f"{contract.actor.type}:{who}"
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
    values = attempts.attempt_values(attempt, outcome, f"{contract.decision.value} by {actor}")
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
            scope,
            run,
            EventKind.ACCEPT_RESUME,
            actor=actor,
            detail={
                "interrupt_id": interrupt.id,
                "decision": contract.decision.value,
                **({} if revalidated else {"revalidation": DEFERRED}),
            },
            writes=[resolve],
            then=attempt_store.attempt_write(values),
            given=given,
            **fields,
        )
    except StaleStateError as exc:
        raise LostRace(str(exc)) from None
    if attempt_id is None:  # (the run moved: LostRace rolls the transaction back)
        raise LostRace("interrupt was resolved concurrently")
    interrupt_store.moved(interrupt, resolved)
    result = attempts.recorded(attempt, int(attempt_id), outcome, values["reason"])
    return Accepted(result, released=True)


@dataclass(frozen=True)
class Accepted:
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
    attempt: attempts.Attempt,
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
        raise LostRace("interrupt was resolved concurrently")
    given = group.answered + 1
    event_store.record_event(
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
    return attempts.record_in(session, attempt, ResumeOutcome.ACCEPTED, reason)


def close_group(run_id: str, checkpoint_id: str, group: str) -> None:
    """The asks of a met group still open are closed now (the resumed step's commit closes
    them too, should this fail): a late answer to one finds it superseded."""
    try:
        with transaction() as session:
            closed = interrupt_store.close_group(session, run_id, checkpoint_id, group)
            if closed:
                event_store.record_event(
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
