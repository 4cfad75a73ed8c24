"""One step of one run: claim, load, execute, commit fenced on the lease epoch, dispatch.

A step is at most two transactions (claim, commit) plus one per effect intent and outcome,
and one publish after commit. A step that follows another in the same task costs one: its
claim is committed with the previous step's checkpoint, and nothing is published.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import timedelta
from functools import partial
from types import TracebackType
from typing import Any

from sqlalchemy.exc import DBAPIError

from models import checkpoints as checkpoint_store
from models import claims as claim_store
from models import effects as effect_store
from models import events as event_store
from models import interrupts as interrupt_store
from models import notifications as notification_store
from models import runs as run_store
from models.contracts import InterruptDecl, json_copy
from models.db import current_dialect, retrying, transaction, utcnow
from models.db_errors import describe, is_transient
from models.effects import LedgerEntry, load_ledger
from models.enums import EventKind, InterruptKind, RunState
from models.errors import (
    BudgetRejectedError,
    EffectError,
    FencedError,
    FlowDefinitionError,
    FlowVersionError,
    InterludeError,
    InvalidInputError,
    LeaseMarginError,
    StaleStateError,
    UnknownFlowError,
    UnknownStepError,
)
from models.settings import get_settings
from models.statements import Write
from models.storable import storable_copy, unstorable_where
from models.tables import Checkpoint, Interrupt, Run
from worker.engine import dispatch
from worker.engine.answer_binding import ResolvedInterrupt
from worker.engine.context import StepContext
from worker.engine.lease import keeper
from worker.engine.reconcile import settle_pending_effects
from worker.engine.release import give_back
from worker.engine.tracebacks import step_traceback
from worker.flows.declarations import PAUSE_INTERRUPT, Suspend, declare
from worker.flows.flow import (
    Flow,
    Migration,
    StepDef,
    continuation,
    registered_flows,
    registry_generation,
)
from worker.flows.migration import carry, deferred_revalidation, migrated_state
from worker.flows.migration import plan as migration_plan
from worker.flows.schemas import OperatorRelease
from worker.gateway.events import deliver_kept
from worker.interrupts import notify, owed_writes
from worker.ops import runlog, step_metrics, tracing
from worker.ops.step_metrics import StepOutcome

log = logging.getLogger(__name__)
# A failed step's log line prints the traceback its run keeps (escaped, bounded).
log.addFilter(runlog.KeptTraceback())

MAX_BACKOFF_SECONDS = 60.0
# A task continues a run's following steps itself, within these bounds (saves a publish,
# a delivery and a claim transaction per step).
MAX_CHAINED_STEPS = 16
MAX_CHAIN_SECONDS = 1.0
# How long a claim waits for a database that is away (a restart) before its task gives up; the
# reaper publishes the run again later.
CLAIM_RETRY_SECONDS = 10.0
# Errors that retrying the step cannot cure.
# Failures that another attempt cannot fix: the step fails at once (an input error included).
PERMANENT_ERRORS = (
    BudgetRejectedError,
    UnknownStepError,
    EffectError,
    FlowDefinitionError,
    InvalidInputError,
)


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


@dataclass
class Claimed:
    run: Run
    flow: Flow
    step: StepDef
    checkpoint: Checkpoint
    resolved: dict[str, ResolvedInterrupt]
    ledger: dict[str, LedgerEntry] | None
    resuming: bool


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


def execute(run_id: str, *, flow: str | None = None) -> Failure | None:
    """Run the next step of ``run_id`` if this delivery wins the claim; otherwise do nothing.

    ``flow``: the flow the task was published for, when its message says (the claim then sends
    the server that flow's steps only); a wrong one costs the claim the long way, nothing else.

    Consecutive steps that neither wait nor fail continue in this task, each committed on its
    own (advance and the next claim share one transaction), up to a small bound so that one
    long run cannot hold a worker; then the run goes back to the queue. Returns the committed
    failure of the last step executed, if it failed.
    """
    owner = worker_identity()
    runlog.bind(run_id)
    try:
        try:
            claimed, failure = _claim(run_id, owner, flow), None
        except DBAPIError as exc:
            if not is_transient(exc):
                raise
            # One line, not a traceback per delivery: the run row keeps what is to be done.
            log.warning(
                "database unavailable, delivery dropped (the reaper publishes the run again): %s",
                describe(exc),
                extra={"action": "claim_failed", "run_id": run_id},
            )
            return None
        if claimed is None:
            # A second delivery (a requeued or republished message), or a run that moved on:
            # the task ends as succeeded, so say why it did nothing.
            log.info(
                "nothing to claim: the run is held, finished or not due; delivery ignored",
                extra={"action": "claim_skipped", "run_id": run_id},
            )
        started, steps = time.monotonic(), 0
        while claimed is not None:
            steps += 1
            may_chain = steps < MAX_CHAINED_STEPS and time.monotonic() - started < MAX_CHAIN_SECONDS
            ended = _execute_step(claimed, owner, may_chain=may_chain)
            claimed, failure = ended.chained, ended.failure
        return failure
    finally:
        runlog.clear()


def _execute_step(claimed: Claimed, owner: str, *, may_chain: bool) -> Ended:
    """Execute the claimed step, commit its outcome and count it; the next claim if chained."""
    begun = time.monotonic()
    run, flow = claimed.run, claimed.flow
    runlog.bind(run.id, flow.name, claimed.step.name)
    ctx = StepContext(
        run_id=run.id,
        flow=flow,
        step=claimed.step.name,
        input=run.input,
        state=dict(claimed.checkpoint.state or {}),
        epoch=run.lease_epoch,
        checkpoint_id=claimed.checkpoint.id,
        checkpoint_seq=claimed.checkpoint.seq,
        started_by=run.started_by,
        budget_allowance=run.budget_allowance,
        budget_consumed=run.budget_consumed,
        resolved=claimed.resolved,
        effects=claimed.ledger,
        resuming=claimed.resuming,
        lease_seconds=_lease(claimed.step),
        lease_expires_at=run.lease_expires_at,
        remembered=dict(claimed.checkpoint.remembered or {}),
        started_at=utcnow(),
    )
    with tracing.step_span(run.id, flow.name, claimed.step.name, resuming=claimed.resuming) as span:
        ended = _run_and_commit(claimed, ctx, owner, may_chain=may_chain, span=span)
        span.set("interlude.outcome", ended.outcome.value)
    error = ended.failure.error_class if ended.failure is not None else None
    step_metrics.observe(
        flow.name, claimed.step.name, ended.outcome, time.monotonic() - begun, error
    )
    return ended


def _run_and_commit(
    claimed: Claimed, ctx: StepContext, owner: str, *, may_chain: bool, span: tracing.StepSpan
) -> Ended:
    """Execute the step with its context, then commit how it ended."""
    run, flow = claimed.run, claimed.flow
    suspension: tuple[InterruptDecl, ...] | None = None
    try:
        if run.pause_requested_by and PAUSE_INTERRUPT not in claimed.resolved:
            raise Suspend(_pause_decl(run, flow))
        with keeper.holding(run.id, run.lease_epoch, _lease(claimed.step), run.lease_expires_at):
            # Inside the lease keeper: settling may wait out a stale owner's grace. The claim
            # read the ledger only because effects of the run are left in intent.
            if claimed.resuming and claimed.ledger is not None:
                settle_pending_effects(ctx)
            next_step = claimed.step.fn(ctx)
        if ctx.mistake is not None:
            # (an interrupt asked twice, caught by the step: it fails all the same)
            raise ctx.mistake
        if ctx.suspended is not None:
            raise FlowDefinitionError(
                detail=f"step {ctx.step!r} caught the signal of its wait for "
                f"{ctx.suspended.decl.name!r} and returned (a bare except, or a return in "
                "finally): let it propagate so that the run waits for the answer"
            )
        if next_step is not None:
            if not isinstance(next_step, str):
                raise FlowDefinitionError(
                    detail=f"step {ctx.step!r} returned a {type(next_step).__name__}, "
                    "not the name of the next step or None"
                )
            flow.get_step(next_step)
        ctx.state = _as_json_state(ctx)
    except Suspend as signal:
        # Committed below, outside the handler: a notifier's failure there is its own, not
        # one raised "during handling of" the step's signal.
        suspension = signal.decls
    except (FencedError, StaleStateError, LeaseMarginError) as exc:
        # (a lease too short to call an effect: the reaper hands the run on once it expires)
        ended = _discard(run.id, exc)
    except Exception as exc:
        # A mistake the step caught fails it, whatever the step raised after it.
        failed = ctx.mistake or exc
        if is_transient(failed):
            ended = _release(claimed, ctx, failed, owner)
        else:
            commit = partial(_commit_failure, claimed, ctx, failed, owner)
            ended = _or_release(commit, claimed, ctx, owner)
    else:
        commit = partial(_commit_advance, claimed, ctx, next_step, owner, chain=may_chain)
        ended = _or_release(commit, claimed, ctx, owner)
    if suspension is not None:
        asked_from = span.traceparent
        if asked_from is not None:
            # The answer's span links back to this one (worker.ops.tracing).
            suspension = tuple(
                d.model_copy(update={"trace_parent": asked_from}) for d in suspension
            )
        commit = partial(_commit_suspend, claimed, ctx, suspension, owner)
        ended = _or_release(commit, claimed, ctx, owner)
    return ended


def _as_json_state(ctx: StepContext) -> dict[str, Any]:
    """A JSON copy of the flow state: what the checkpoint stores is what the next step sees."""
    try:
        state = json_copy(ctx.state)
    except (TypeError, ValueError) as exc:
        raise FlowDefinitionError(
            detail=f"step {ctx.step!r} left state that is not JSON: {exc}"
        ) from None
    if not isinstance(state, dict):
        raise FlowDefinitionError(detail=f"step {ctx.step!r} replaced ctx.state with a non-dict")
    where = unstorable_where(state)
    if where is not None:
        # PostgreSQL refuses it at the commit, outside the step: the run would sit in running
        # until the reaper, then fail as if its worker had died. SQLite keeps it; refused alike.
        raise FlowDefinitionError(
            detail=f"step {ctx.step!r} left state holding NUL or unpaired surrogates{where}"
        )
    return state


def _or_release(
    commit: Callable[[], Ended], claimed: Claimed, ctx: StepContext, owner: str
) -> Ended:
    """``commit()``; when it meets a transient database error, the run is given back."""
    try:
        return commit()
    except DBAPIError as exc:
        if not is_transient(exc):
            raise
        return _release(claimed, ctx, exc, owner)


def _release(claimed: Claimed, ctx: StepContext, exc: DBAPIError, owner: str) -> Ended:
    """The database failed the step for a moment: the run goes back to the queue at once, with
    its effects' outcomes, rather than wait for its lease to expire (``worker.engine.release``)."""
    give_back(
        claimed.run,
        epoch=ctx.epoch,
        step=ctx.step,
        outcomes=_outcomes(ctx),
        owner=owner,
        exc=exc,
        within=_lease(claimed.step),
    )
    return Ended(StepOutcome.RELEASED)


def _discard(run_id: str, exc: InterludeError) -> Ended:
    log.warning("step result discarded: %s", exc, extra={"action": "discard", "run_id": run_id})
    return Ended(StepOutcome.DISCARDED)


def _claim(run_id: str, owner: str, flow_name: str | None = None) -> Claimed | None:
    def attempt() -> tuple[Claimed | None, list[tuple[Flow, Interrupt]]]:
        waiting: list[tuple[Flow, Interrupt]] = []
        claimed = _claim_at_once(run_id, owner, flow_name)
        if claimed is not None:
            return claimed, waiting
        return _claim_run(run_id, owner, waiting), waiting

    # (A database restarting is waited for a few seconds. If a try's commit landed after all,
    # the next finds the run claimed: nothing runs, and the reaper hands the run on when that
    # lease expires.)
    claimed, waiting = retrying(attempt, within=CLAIM_RETRY_SECONDS)
    # A run renewed for review on a newer version waits now: notify once it is committed.
    for flow, interrupt in waiting:
        notify(flow, interrupt)
    return claimed


def _claim_at_once(run_id: str, owner: str, flow_name: str | None = None) -> Claimed | None:
    """The common claim in one statement (PostgreSQL): a due run at a step of a flow version
    this process has (of ``flow_name``, when the task named it). None when it is not that
    simple: ``_claim_run`` then decides."""
    if not current_dialect().claims_in_one_statement:
        return None
    claimable = _claimable()
    # The server parses the steps sent at every claim: a worker with many flows sends the
    # task's flow's own (its versions' steps), not all of them. A flow this process does not
    # have would match nothing: no statement is sent, and the long way, which reads the run,
    # decides.
    steps = claimable.steps if flow_name is None else claimable.by_flow.get(flow_name)
    if steps is None:
        return None
    with transaction(autocommit=True) as session:
        found = claim_store.claim_at_once(session, run_id, owner=owner, steps=steps)
        if found is None:
            return None
        # The ledger is read only when effects wait to be settled (as in ``_claim_run``).
        ledger = load_ledger(session, run_id) if found.unsettled else None
    run = found.run
    # (The statement matched a registered version and step: both are in the cache.)
    flow = claimable.flows[(run.flow_name, run.flow_version)]
    step = flow.get_step(run.next_step or "")
    resolved = {row.name: _resolved(row) for row in found.answered}
    return Claimed(run, flow, step, found.checkpoint, resolved, ledger, found.resuming)


@dataclass(frozen=True)
class _Claimable:
    """What ``_claim_at_once`` needs of the registry, as of ``key`` (its generation and the
    default lease): the steps it may claim, and the flows by version."""

    key: tuple[int, float]
    steps: claim_store.ClaimableSteps
    flows: dict[tuple[str, int], Flow]
    # The steps of each flow name, every version this process has.
    by_flow: dict[str, claim_store.ClaimableSteps]


_claimable_cache: _Claimable | None = None


def _claimable() -> _Claimable:
    """The claimable steps, derived again only when a flow was registered or the lease changed."""
    global _claimable_cache
    cached = _claimable_cache
    if cached is not None and cached.key == (registry_generation(), get_settings().lease_seconds):
        return cached
    generation, flows = registered_flows()
    every = [
        claim_store.ClaimableStep(
            flow=flow.name,
            version=flow.version,
            step=step.name,
            lease_seconds=_lease(step),
            revalidates=bool(flow.revalidators),
        )
        for flow in flows
        for step in flow.steps.values()
    ]
    by_flow = {
        name: claim_store.ClaimableSteps([s for s in every if s.flow == name])
        for name in {s.flow for s in every}
    }
    by_version = {(flow.name, flow.version): flow for flow in flows}
    _claimable_cache = _Claimable(
        (generation, get_settings().lease_seconds),
        claim_store.ClaimableSteps(every),
        by_version,
        by_flow,
    )
    return _claimable_cache


def _claim_run(run_id: str, owner: str, waiting: list[tuple[Flow, Interrupt]]) -> Claimed | None:
    with transaction() as session:
        found = claim_store.load_claimable(session, run_id)
        if found is None:
            return None
        run, checkpoint, answered = found.run, found.checkpoint, found.answered
        try:
            flow, migration = continuation(run.flow_name, run.flow_version, run_id=run.id)
            step = flow.get_step(run.next_step or "")
            migrated = _migrated(run, checkpoint, flow, migration)
            if migrated is not None:
                carries = migration_plan(run, answered, migrated.state, flow)
            else:
                carries = deferred_revalidation(session, run, checkpoint, answered, flow)
                # The evidence changed: the answers move to a checkpoint of the same state.
                migrated = _same_state(run, checkpoint) if carries else None
        except (FlowVersionError, UnknownFlowError, UnknownStepError, FlowDefinitionError) as exc:
            # Fail closed: the run stays where it is and the operator sees why (once: the
            # reaper republishes the run until a worker that can continue it takes it).
            event_store.record_refusal_once(
                session, run.id, actor=f"worker:{owner}", reason=str(exc)
            )
            log.error("cannot continue run: %s", exc, extra={"action": "refuse", "run_id": run_id})
            return None
        resuming = run.state == RunState.RESUMING.value
        old_version = run.flow_version
        fields: dict[str, Any] = {}
        facts: list[tuple[EventKind, Any]] = []
        if migrated is not None:
            fields = {"flow_version": flow.version, "checkpoint_seq": migrated.seq}
        if migrated is not None and migration is not None:
            detail: dict[str, Any] = {
                "from": old_version,
                "to": flow.version,
                "checkpoint": migrated.seq,
            }
            if carries:
                detail["answers"] = [c.answered.id for c in carries]
            facts.append((EventKind.MIGRATE, detail))
        executions = run.step_executions + 1
        if executions > 1:
            facts.append((EventKind.STEP_REEXECUTED, {"step": step.name, "executions": executions}))
        writes = (
            [checkpoint_store.checkpoint_insert(session, migrated)] if migrated is not None else []
        )
        claimed = claim_store.claim(
            session,
            run_id,
            owner=owner,
            lease_seconds=_lease(step),
            facts=facts,
            writes=writes,
            **fields,
        )
        if claimed is None:
            return None
        # The ledger is read now only when effects wait to be settled; otherwise an effect
        # reads it only if its key turns out to be taken (a query saved on the hot path).
        ledger = load_ledger(session, run.id) if found.unsettled else None
        resolved = {row.name: _resolved(row) for row in answered}
        if migrated is not None:
            checkpoint = migrated
            carried = carry(session, run, carries, migrated, actor=f"worker:{owner}")
            if carried.waiting:
                # What the notifiers are owed, in this transaction (told once it commits).
                notification_store.owe(
                    session, [w for i in carried.waiting for w in owed_writes(flow, i)]
                )
                waiting.extend((flow, interrupt) for interrupt in carried.waiting)
                return None
            # Answers carried onto the new version: a step asking otherwise renews the review.
            resolved = {row.name: replace(_resolved(row), carried=True) for row in carried.resolved}
        return Claimed(run, flow, step, checkpoint, resolved, ledger, resuming)


def _migrated(
    run: Run, checkpoint: Checkpoint, flow: Flow, migration: Migration | None
) -> Checkpoint | None:
    """The checkpoint that carries a run onto ``flow``'s version, if it needs a migration.

    Waiting, resuming and answered runs migrate too: their answers follow them
    (``worker.flows.migration``).
    """
    if migration is None:
        return None
    state = migrated_state(
        migration,
        checkpoint.state,
        run_id=run.id,
        from_version=run.flow_version,
        to_version=flow.version,
    )
    return checkpoint_store.new_checkpoint(
        run,
        step=None,
        next_step=run.next_step,
        state=state,
        budget_consumed=run.budget_consumed,
        effects=[],
        epoch=run.lease_epoch + 1,
        # The step asks again on the new checkpoint: what it computed once goes with it.
        remembered=checkpoint.remembered,
    )


def _same_state(run: Run, checkpoint: Checkpoint) -> Checkpoint:
    return checkpoint_store.new_checkpoint(
        run,
        step=None,
        next_step=run.next_step,
        state=dict(checkpoint.state or {}),
        budget_consumed=run.budget_consumed,
        effects=[],
        epoch=run.lease_epoch + 1,
        # The step asks again on the new checkpoint: what it computed once goes with it.
        remembered=checkpoint.remembered,
    )


def _lease(step: StepDef) -> float:
    return step.lease_seconds or get_settings().lease_seconds


def _resolved(row: Interrupt) -> ResolvedInterrupt:
    return ResolvedInterrupt(
        id=row.id,
        name=row.name,
        schema_name=row.schema_name,
        schema_version=row.schema_version,
        decision=row.decision or "",
        resume_input=row.resume_input,
        resolved_by=row.resolved_by or "",
        evidence_hash=row.evidence_hash,
        evidence_canon=row.evidence_canon,
        scope=row.scope,
        policy_version=row.policy_version,
    )


def _pause_decl(run: Run, flow: Flow) -> InterruptDecl:
    return declare(
        PAUSE_INTERRUPT,
        kind=InterruptKind.OPERATOR,
        input=OperatorRelease,
        authority=list(flow.operator_roles),
        expires_in=get_settings().pause_expires_in,
        evidence={"requested_by": run.pause_requested_by, "step": run.next_step},
        reason=f"paused by {run.pause_requested_by}",
    )


def _counted(ctx: StepContext) -> list[tuple[EventKind, Any]]:
    """The step's repeated-work counters, as events of its commit."""
    return [(EventKind(name), {"count": count}) for name, count in ctx.counters.items()]


def _outcomes(ctx: StepContext) -> Sequence[Write]:
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


def _commit_suspend(
    claimed: Claimed, ctx: StepContext, decls: tuple[InterruptDecl, ...], owner: str
) -> Ended:
    """Commit the run's wait on ``decls`` (one interrupt, or the open asks of a group)."""
    run, actor = claimed.run, f"worker:{owner}"
    unrecorded = [
        k for k, e in (ctx.effects or {}).items() if e.status == "intent" and e.epoch == ctx.epoch
    ]
    if unrecorded:
        return _commit_failure(
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
                writes=[*writes, *_outcomes(ctx)],
                lease_owner=None,
                lease_expires_at=None,
            )
    except (FencedError, StaleStateError) as exc:
        return _discard(run.id, exc)
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


def _commit_advance(
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
            lease_expires_at=now + timedelta(seconds=_lease(step)),
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
                writes=[checkpoint_store.checkpoint_insert(session, checkpoint), *_outcomes(ctx)],
                **fields,
            )
    except (FencedError, StaleStateError) as exc:
        return _discard(run.id, exc)
    if next_step is None:
        return Ended(StepOutcome.COMPLETED)
    if step is not None:
        # The ledger as this process knows it goes on with the run (no read for its effects).
        chained = Claimed(run, claimed.flow, step, checkpoint, {}, ctx.effects, False)
        return Ended(StepOutcome.ADVANCED, chained=chained)
    dispatch.publish_step(run.id, flow=run.flow_name, step=next_step)
    return Ended(StepOutcome.ADVANCED)


def _commit_failure(claimed: Claimed, ctx: StepContext, exc: Exception, owner: str) -> Ended:
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
                writes=_outcomes(ctx),
                step_attempts=attempts,
                error=error,
                **retrying,
            )
    except (FencedError, StaleStateError) as fenced:
        return _discard(run.id, fenced)
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
