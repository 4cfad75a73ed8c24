"""Claiming a run's next step under a fresh lease and fencing epoch: in one statement
(PostgreSQL), or the long way, which migrates the run onto a flow version this process has,
carries its answers there (or renews their review), or refuses a run it cannot continue.

What a claim hands the step runtime (``Claimed``): the run, its flow and step, the checkpoint,
the answers given there and, when effects wait to be settled, the ledger.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace
from typing import Any

from models import checkpoints as checkpoint_store
from models import claims as claim_store
from models import events as event_store
from models import notifications as notification_store
from models.db import current_dialect, retrying, transaction
from models.effects import LedgerEntry, load_ledger
from models.enums import EventKind, RunState
from models.errors import FlowDefinitionError, FlowVersionError, UnknownFlowError, UnknownStepError
from models.settings import get_settings
from models.tables import Checkpoint, Interrupt, Run
from worker.engine.answer_binding import ResolvedInterrupt
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
from worker.interrupts import notify, owed_writes

# The step's log lines keep the logger they had before ``worker.engine.runtime`` was split
# (claiming, running and committing a step): logging configuration and JSON lines name it.
STEP_LOGGER = "worker.engine.runtime"
log = logging.getLogger(STEP_LOGGER)

# How long a claim waits for a database that is away (a restart) before its task gives up; the
# reaper publishes the run again later.
CLAIM_RETRY_SECONDS = 10.0


@dataclass
class Claimed:
    run: Run
    flow: Flow
    step: StepDef
    checkpoint: Checkpoint
    resolved: dict[str, ResolvedInterrupt]
    ledger: dict[str, LedgerEntry] | None
    resuming: bool


def claim(run_id: str, owner: str, flow_name: str | None = None) -> Claimed | None:
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
            lease_seconds=lease(step),
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
            lease_seconds=lease(step),
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


def lease(step: StepDef) -> float:
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
