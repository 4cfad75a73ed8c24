"""Answers across a deployment: a run answered on a retired flow version goes on with a newer one.

An accepted answer is bound to the interrupt it answered (name and input schema), not to the
flow's code. When a run with answers migrates at claim (``worker.engine.claiming``), each answer is
asked again on the new version, at the migration checkpoint, after the new version's
revalidation of the interrupt (against the migrated state):

- the evidence is the same (or, when the new version declares how the old evidence reads
  now with ``flow.migrates_evidence``, the same once mapped): the new interrupt is resolved
  at once with the same answer (``answer_carried``); the step finds it if it asks the same
  name with the same schema and the evidence the answer is bound to
(``worker.engine.answer_binding``);
- the evidence changed: the new interrupt stays pending with the current evidence and the old
  answer as ``previous_input`` (``review_renewed``), and the run waits on it.

The same check runs, without a migration, for a resume accepted where the flow's code was not
loaded (its revalidation was deferred to the worker): if the evidence changed, the answers move
to a new checkpoint with the same state and the run waits on the renewed review.

A new version whose step asks another interrupt (or the same name with another schema) gets a
renewed review from the step itself (``worker.engine.context``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from models import events as event_store
from models import interrupts as interrupt_store
from models import runs as run_store
from models.canonical import EVIDENCE_CANON, evidence_hash
from models.contracts import json_copy
from models.db import utcnow
from models.enums import EventKind, RunState
from models.errors import FlowDefinitionError
from models.tables import Checkpoint, Interrupt, Run
from worker.flows.flow import Flow, RevalidationContext
from worker.interrupts import view

# On an ``accept_resume`` event: the gateway had no code of the run's flow to revalidate with.
DEFERRED = "deferred"


@dataclass(frozen=True)
class Carry:
    """One answer of the old checkpoint, and the evidence the new version computes for it.

    ``bound_hash``: what the answer holds for on the new version — the old evidence's hash,
    or, when the new version declares how the old evidence reads now
    (``flow.migrates_evidence``), the hash of the old evidence so mapped.
    """

    answered: Interrupt
    evidence: Any
    evidence_hash: str
    bound_hash: str

    @property
    def renewed(self) -> bool:
        return self.evidence_hash != self.bound_hash


def plan(run: Run, answered: list[Interrupt], state: dict[str, Any], flow: Flow) -> list[Carry]:
    """Revalidate each answer on ``flow`` (the new version) against the migrated ``state``.

    Writes nothing; a revalidation or an evidence migration that fails is the flow's error
    (the run is refused, stays where it is, and the refusal is recorded).
    """
    carries = []
    for old in answered:
        evidence, bound = old.evidence, old.evidence_hash
        maps = flow.evidence_migrations.get((run.flow_version, old.name))
        revalidator = flow.revalidators.get(old.name)
        try:
            if maps is not None:
                # Compared after mapping: the answer holds if the new version asks with the
                # evidence that was approved, in its new form.
                evidence = json_copy(maps(old.evidence))
                bound = evidence_hash(evidence)
            if revalidator is None:
                carries.append(Carry(old, evidence, bound, bound))
                continue
            context = RevalidationContext(
                run_id=run.id, input=run.input, state=dict(state), interrupt=view(old)
            )
            current = revalidator(context)
            carries.append(Carry(old, current, evidence_hash(current), bound))
        except Exception as exc:
            what = "revalidation" if maps is None else "evidence migration or revalidation"
            raise FlowDefinitionError(
                detail=f"{what} of {old.name!r} on {flow.name!r} version {flow.version} "
                f"failed: {type(exc).__name__}: {exc}"
            ) from None
    return carries


def deferred_revalidation(
    session: Session, run: Run, checkpoint: Checkpoint, answered: list[Interrupt], flow: Flow
) -> list[Carry]:
    """For a resuming run whose gateway could not revalidate: the answers, if any changed.

    Costs nothing for flows without revalidators; else one read of the run's last acceptance.
    """
    if run.state != RunState.RESUMING.value or not any(
        row.name in flow.revalidators for row in answered
    ):
        return []
    accepted = event_store.last_event_detail(session, run.id, EventKind.ACCEPT_RESUME)
    if not isinstance(accepted, dict) or accepted.get("revalidation") != DEFERRED:
        return []
    carries = plan(run, answered, dict(checkpoint.state or {}), flow)
    return carries if any(c.renewed for c in carries) else []


@dataclass(frozen=True)
class Carried:
    """The answers asked again on the new checkpoint: resolved at once, or waiting for review."""

    resolved: list[Interrupt]
    waiting: list[Interrupt]


def carry(
    session: Session, run: Run, carries: list[Carry], checkpoint: Checkpoint, *, actor: str
) -> Carried:
    """Ask each answer again at ``checkpoint`` on the run's (new) version; the renewed ones.

    A renewed review moves the claimed run to ``waiting`` first: its interrupts are bound to
    the state version the run waits at.
    """
    renewed = [c for c in carries if c.renewed]
    if renewed:
        run_store.move(
            session,
            run,
            EventKind.SUSPEND,
            actor=actor,
            fence_epoch=run.lease_epoch,
            detail={
                "interrupt": renewed[0].answered.name,
                "kind": renewed[0].answered.kind,
                "renewed_on_version": run.flow_version,
            },
            lease_owner=None,
            lease_expires_at=None,
        )
    waiting: list[Interrupt] = []
    resolved: list[Interrupt] = []
    events: list[tuple[EventKind, Any]] = []
    for c in carries:
        old = c.answered
        asked = interrupt_store.ask_again(
            session,
            old,
            checkpoint_id=checkpoint.id,
            flow_version=run.flow_version,
            state_version=run.state_version,
            evidence=c.evidence,
            evidence_hash=c.evidence_hash,
            # A hash computed here follows RFC 8785, whatever the old one followed.
            evidence_canon=(
                old.evidence_canon if c.evidence_hash == old.evidence_hash else EVIDENCE_CANON
            ),
            previous_input=old.resume_input if c.renewed else old.previous_input,
        )
        detail = {"old": old.id, "new": asked.id, "name": old.name, "version": run.flow_version}
        if c.renewed:
            waiting.append(asked)
            events.append((EventKind.REVIEW_RENEWED, {**detail, "evidence_hash": c.evidence_hash}))
            continue
        # Created pending in this transaction: nobody else can have moved it.
        interrupt_store.transition(
            session,
            asked,
            "resolve",
            decision=old.decision,
            resume_input=old.resume_input,
            resolved_by=old.resolved_by,
            resolved_at=utcnow(),
        )
        resolved.append(asked)
        events.append((EventKind.ANSWER_CARRIED, detail))
    event_store.record_events(session, run.id, actor=actor, events=events)
    return Carried(resolved, waiting)


def migrated_state(
    migration: Callable[[dict[str, Any]], Any],
    state: dict[str, Any] | None,
    *,
    run_id: str,
    from_version: int,
    to_version: int,
) -> dict[str, Any]:
    """``state`` as ``migration`` carries it to the new version: a JSON dict, or
    FlowDefinitionError saying what went wrong (a step's run, or ``flows check``, reports it)."""
    try:
        migrated = json_copy(migration(dict(state or {})))
    except Exception as exc:
        raise FlowDefinitionError(
            detail=f"migration of run {run_id} from version {from_version} to "
            f"{to_version} failed: {type(exc).__name__}: {exc}"
        ) from None
    if not isinstance(migrated, dict):
        raise FlowDefinitionError(detail=f"migration of run {run_id} did not return a dict")
    return migrated
