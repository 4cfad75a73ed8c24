"""Committing a step's outcome, fenced on the lease epoch: its wait on interrupts (suspend),
its checkpoint (advance; with the next step's claim when the task continues the run) or its
failure (retry after a backoff, or fail for good); a result fenced out is discarded.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from types import TracebackType
from typing import Any

from models import checkpoints as checkpoint_store
from models import effects as effect_store
from models import interrupts as interrupt_store
from models import runs as run_store
from models.contracts import InterruptDecl
from models.db import transaction, utcnow
from models.enums import EventKind, InterruptKind
from models.errors import (
    BudgetRejectedError,
    EffectError,
    FencedError,
    FlowDefinitionError,
    InterludeError,
    InvalidInputError,
    StaleStateError,
    UnknownStepError,
)
from models.statements import Write
from models.storable import storable_copy
from models.tables import Interrupt
from worker.engine import dispatch
from worker.engine.claiming import STEP_LOGGER, Claimed, lease
from worker.engine.context import StepContext
from worker.engine.tracebacks import step_traceback
from worker.gateway.events import deliver_kept
from worker.interrupts import notify, owed_writes
from worker.ops import runlog
from worker.ops.step_metrics import StepOutcome

log = logging.getLogger(STEP_LOGGER)  # (claiming's: the step's log lines keep one logger)
# A failed step's log line prints the traceback its run keeps (escaped, bounded).
log.addFilter(runlog.KeptTraceback())

MAX_BACKOFF_SECONDS = 60.0
# Failures that another attempt cannot fix: the step fails at once (an input error included).
PERMANENT_ERRORS = (
    BudgetRejectedError,
    UnknownStepError,
    EffectError,
    FlowDefinitionError,
    InvalidInputError,
)


@dataclass(frozen=True)
class Failure:
    """A step's failure, committed: retried after ``retry_in`` seconds, or for good (None).

    What the Celery task reports once the commit is durable (``worker.engine.tasks``): RETRY or
    FAILURE.
    """

    run_id: str
    flow: str
    step: str
    attempt: int
    error: str  # as committed on the run: "ErrorClass: message"
    error_class: str
    retry_in: float | None
    # The step's own frames, for the task's failure in Flower (not compared, not shown).
    traceback: TracebackType | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Ended:
    """How one step's execution ended; the next step if this task continues with it."""

    outcome: StepOutcome
    chained: Claimed | None = None
    failure: Failure | None = None


def discard(run_id: str, exc: InterludeError) -> Ended:
    log.warning("step result discarded: %s", exc, extra={"action": "discard", "run_id": run_id})
    return Ended(StepOutcome.DISCARDED)


def _counted(ctx: StepContext) -> list[tuple[EventKind, Any]]:
    """The step's repeated-work counters, as events of its commit."""
    return [(EventKind(name), {"count": count}) for name, count in ctx.counters.items()]


def outcomes(ctx: StepContext) -> Sequence[Write]:
    """Effect outcomes the step has not written yet, and the closing of the ask groups whose
    need it found met, to be written with its commit."""
    writes = list(
        effect_store.outcome_writes(
            run_id=ctx.run_id, epoch=ctx.epoch, outcomes=ctx.pending_outcomes
        )
    )
    for group in ctx.groups_met:
        # (The gateway closed them once the need was met; a crash in between leaves it here.)
        writes.append(interrupt_store.close_group_write(ctx.run_id, ctx.checkpoint_id, group))
    return writes


def commit_suspend(
    claimed: Claimed, ctx: StepContext, decls: tuple[InterruptDecl, ...], owner: str
) -> Ended:
    """Commit the run's wait on ``decls`` (one interrupt, or the open asks of a group)."""
    run, actor = claimed.run, f"worker:{owner}"
    unrecorded = [
        k for k, e in (ctx.effects or {}).items() if e.status == "intent" and e.epoch == ctx.epoch
    ]
    if unrecorded:
        return commit_failure(
            claimed,
            ctx,
            EffectError(run_id=run.id, name=unrecorded[0], detail="left unrecorded at suspension"),
            owner,
        )
    interrupts: list[Interrupt] = []
    facts: list[tuple[EventKind, Any]] = []
    writes: list[Write] = []
    for decl in decls:
        interrupt, insert_interrupt = interrupt_store.new_interrupt(
            run,
            decl,
            step=ctx.step,
            checkpoint_id=ctx.checkpoint_id,
            state_version=run.state_version + 1,
        )
        interrupts.append(interrupt)
        facts.append(interrupt_store.interrupt_event(interrupt.id, decl))
        writes.append(insert_interrupt)
        # The notifications owed, in the same statement (none without notifiers).
        writes.extend(owed_writes(claimed.flow, interrupt))
        renewal = ctx.renewals.get(decl.supersedes or "")
        if renewal is not None and decl.supersedes is not None:
            # The answer does not bind to what the step asks now: it stays as history, and
            # the new interrupt answers in its place.
            writes.append(interrupt_store.answer_renewed_write(decl.supersedes, interrupt.id))
            facts.append((EventKind.REVIEW_RENEWED, {**renewal, "new": interrupt.id}))
            log.warning(
                "answer %s to %s does not bind to what step %s asks now: renewed review %s",
                decl.supersedes,
                decl.name,
                ctx.step,
                interrupt.id,
                extra={"action": "review_renewed", "run_id": run.id},
            )
    if ctx.remembered_more:
        # Kept with the checkpoint the answer binds to: the next execution reads them.
        writes.append(checkpoint_store.remembered_write(ctx.checkpoint_id, ctx.remembered))
    first = decls[0]
    detail: dict[str, Any] = {"interrupt": first.name, "kind": first.kind}
    if first.ask_group is not None:
        detail.update(group=first.ask_group, need=first.group_need, asks=[d.name for d in decls])
    try:
        with transaction(autocommit=True) as session:
            run_store.move(
                session,
                run,
                EventKind.SUSPEND,
                actor=actor,
                fence_epoch=ctx.epoch,
                detail=detail,
                facts=[*facts, *_counted(ctx)],
                writes=[*writes, *outcomes(ctx)],
                lease_owner=None,
                lease_expires_at=None,
            )
    except (FencedError, StaleStateError) as exc:
        return discard(run.id, exc)
    log.info(
        "run waiting on %s",
        ", ".join(d.name for d in decls),
        extra={"action": "suspend", "run_id": run.id},
    )
    for interrupt in interrupts:
        notify(claimed.flow, interrupt)
    awaited = [d.name for d in decls if d.kind == InterruptKind.EVENT.value]
    if awaited:
        # An event sent before the run asked for it was kept: it answers now.
        deliver_kept(run.id, awaited)
    return Ended(StepOutcome.WAITING)


def commit_advance(
    claimed: Claimed, ctx: StepContext, next_step: str | None, owner: str, *, chain: bool
) -> Ended:
    """Commit the step's checkpoint and move on; when chaining, claim the next step with it."""
    run, actor = claimed.run, f"worker:{owner}"
    checkpoint = checkpoint_store.new_checkpoint(
        run,
        step=ctx.step,
        next_step=next_step,
        state=ctx.state,
        budget_consumed=ctx.budget_consumed,
        effects=ctx.applied_effects,
        epoch=ctx.epoch,
        started_at=ctx.started_at,
    )
    now = utcnow()
    fields: dict[str, Any] = {
        "checkpoint_seq": checkpoint.seq,
        "next_step": next_step,
        "budget_consumed": ctx.budget_consumed,
        "step_attempts": 0,
        "step_executions": 0,
        "lost_leases": 0,
        "lease_owner": None,
        "lease_expires_at": None,
        "error": None,
    }
    done = {"step": ctx.step, "checkpoint": checkpoint.seq, "next": next_step}
    triggers: list[tuple[EventKind, Any]] = [
        (EventKind.COMPLETE if next_step is None else EventKind.ADVANCE, done)
    ]
    step = claimed.flow.get_step(next_step) if next_step is not None and chain else None
    if next_step is None:
        fields["output"] = ctx.state
    elif step is None:
        fields["dispatched_at"] = now
    else:
        # Continue in this task: the next claim is part of this commit (no publish).
        epoch = run.lease_epoch + 1
        triggers.append((EventKind.CLAIM, {"epoch": epoch, "step": next_step}))
        fields.update(
            lease_owner=owner,
            lease_epoch=epoch,
            lease_expires_at=now + timedelta(seconds=lease(step)),
            step_executions=1,
            not_before=None,
        )
    try:
        with transaction(autocommit=True) as session:
            run_store.move_through(
                session,
                run,
                triggers,
                actor=actor,
                fence_epoch=ctx.epoch,
                facts=_counted(ctx),
                writes=[checkpoint_store.checkpoint_insert(session, checkpoint), *outcomes(ctx)],
                **fields,
            )
    except (FencedError, StaleStateError) as exc:
        return discard(run.id, exc)
    if next_step is None:
        return Ended(StepOutcome.COMPLETED)
    if step is not None:
        # The ledger as this process knows it goes on with the run (no read for its effects).
        chained = Claimed(run, claimed.flow, step, checkpoint, {}, ctx.effects, False)
        return Ended(StepOutcome.ADVANCED, chained=chained)
    dispatch.publish_step(run.id, flow=run.flow_name, step=next_step)
    return Ended(StepOutcome.ADVANCED)


def commit_failure(claimed: Claimed, ctx: StepContext, exc: Exception, owner: str) -> Ended:
    run, step, actor = claimed.run, claimed.step, f"worker:{owner}"
    # A message may repeat text no database stores (PostgreSQL would refuse the commit).
    error = storable_copy(f"{type(exc).__name__}: {exc}")
    attempts = run.step_attempts + 1
    retry = attempts <= step.retries and not isinstance(exc, PERMANENT_ERRORS)
    # The traceback goes with the event (``runs show --traceback``) and into the log line.
    detail = {"step": step.name, "attempt": attempts, "error": error}
    detail["traceback"] = step_traceback(exc)
    log.warning(
        "step %s failed (attempt %d): %s",
        step.name,
        attempts,
        error,
        exc_info=exc,
        extra={"action": "step_failed", "run_id": run.id, "traceback": detail["traceback"]},
    )
    backoff = min(step.backoff * 2 ** (attempts - 1), MAX_BACKOFF_SECONDS)
    # A retry gives up the lease and waits out its backoff before its task is published.
    retrying: dict[str, Any] = {}
    if retry:
        now = utcnow()
        retrying = {
            "lease_owner": None,
            "lease_expires_at": None,
            "not_before": now + timedelta(seconds=backoff),
            "dispatched_at": now,
        }
    try:
        with transaction(autocommit=True) as session:
            run_store.move(
                session,
                run,
                EventKind.RETRY if retry else EventKind.FAIL,
                actor=actor,
                fence_epoch=ctx.epoch,
                detail=detail,
                facts=_counted(ctx),
                writes=outcomes(ctx),
                step_attempts=attempts,
                error=error,
                **retrying,
            )
    except (FencedError, StaleStateError) as fenced:
        return discard(run.id, fenced)
    failure = Failure(
        run_id=run.id,
        flow=claimed.flow.name,
        step=step.name,
        attempt=attempts,
        error=error,
        error_class=type(exc).__name__,
        retry_in=backoff if retry else None,
        traceback=exc.__traceback__,
    )
    if retry:
        dispatch.publish_step(run.id, flow=run.flow_name, step=step.name, countdown=backoff)
        return Ended(StepOutcome.RETRYING, failure=failure)
    else:
        log.error(
            "run failed for good: step %s failed %d time(s): %s",
            step.name,
            attempts,
            error,
            extra={"action": "run_failed", "run_id": run.id},
        )
    return Ended(StepOutcome.FAILED, failure=failure)
