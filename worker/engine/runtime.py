"""One step of one run: claim, load, execute, commit fenced on the lease epoch, dispatch.

A step is at most two transactions (claim, commit) plus one per effect intent and outcome,
and one publish after commit. A step that follows another in the same task costs one: its
claim is committed with the previous step's checkpoint, and nothing is published.

The claim is ``worker.engine.claiming``'s, the commit of how the step ended
``worker.engine.commits``'s.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from sqlalchemy.exc import DBAPIError

from models.contracts import InterruptDecl, json_copy
from models.db import utcnow
from models.db_errors import describe, is_transient
from models.enums import InterruptKind
from models.errors import FencedError, FlowDefinitionError, LeaseMarginError, StaleStateError
from models.settings import get_settings
from models.storable import unstorable_where
from models.tables import Run
from worker.engine.claiming import Claimed, claim, lease
from worker.engine.commits import (
    Ended,
    Failure,
    commit_advance,
    commit_failure,
    commit_suspend,
    discard,
    outcomes,
)
from worker.engine.context import StepContext
from worker.engine.lease import keeper
from worker.engine.reconcile import settle_pending_effects
from worker.engine.release import give_back
from worker.flows.declarations import PAUSE_INTERRUPT, Suspend, declare
from worker.flows.flow import Flow
from worker.flows.schemas import OperatorRelease
from worker.ops import runlog, step_metrics, tracing
from worker.ops.step_metrics import StepOutcome

log = logging.getLogger(__name__)

# A task continues a run's following steps itself, within these bounds (saves a publish,
# a delivery and a claim transaction per step).
MAX_CHAINED_STEPS = 16
MAX_CHAIN_SECONDS = 1.0


def worker_identity() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


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
            claimed, failure = claim(run_id, owner, flow), None
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
        lease_seconds=lease(claimed.step),
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
        with keeper.holding(run.id, run.lease_epoch, lease(claimed.step), run.lease_expires_at):
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
        # The signal is kept by the context (ctx.suspended), and its traceback holds the
        # frames that hold the context: a cycle of some fifty objects a suspended step, which
        # only the garbage collector could free (its collections, full ones included, cost a
        # worker 0.085 ms of CPU a W1 run). A signal needs no traceback.
        signal.__traceback__ = None
    except (FencedError, StaleStateError, LeaseMarginError) as exc:
        # (a lease too short to call an effect: the reaper hands the run on once it expires)
        ended = discard(run.id, exc)
    except Exception as exc:
        # A mistake the step caught fails it, whatever the step raised after it.
        failed = ctx.mistake or exc
        if is_transient(failed):
            ended = _release(claimed, ctx, failed, owner)
        else:
            commit = partial(commit_failure, claimed, ctx, failed, owner)
            ended = _or_release(commit, claimed, ctx, owner)
    else:
        commit = partial(commit_advance, claimed, ctx, next_step, owner, chain=may_chain)
        ended = _or_release(commit, claimed, ctx, owner)
    if suspension is not None:
        asked_from = span.traceparent
        if asked_from is not None:
            # The answer's span links back to this one (worker.ops.tracing).
            suspension = tuple(
                d.model_copy(update={"trace_parent": asked_from}) for d in suspension
            )
        commit = partial(commit_suspend, claimed, ctx, suspension, owner)
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
        outcomes=outcomes(ctx),
        owner=owner,
        exc=exc,
        within=lease(claimed.step),
    )
    return Ended(StepOutcome.RELEASED)


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
