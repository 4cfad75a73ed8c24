"""The effect ledger: intent is committed before the call, the outcome right after it.

A step may execute again; an effect recorded ``applied`` returns its receipt without being
called again, and an ``intent`` whose outcome is unknown (the process died in between) is
reconciled before the step continues, or handed to an operator as a ``repair`` interrupt.
Every ledger write is fenced on the step's lease epoch, which ``fn`` receives as
``fencing_token=`` to pass on to systems that refuse stale tokens (``worker.fencing`` has the
lease margin and the grace that keep a frozen owner's late call apart from a new owner's).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from models import effects as store
from models import interrupts as interrupt_store
from models.contracts import json_copy, json_hash
from models.db import transaction
from models.effects import LedgerEntry, Outcome
from models.enums import Decision, EffectStatus, EventKind, InterruptKind
from models.errors import EffectError, FencedError, LeaseMarginError
from models.statements import Write
from worker import fencing
from worker.declarations import Suspend, declare
from worker.flows import Flow
from worker.schemas import RepairResolution

log = logging.getLogger(__name__)
REPAIR_EXPIRES_IN = 7 * 24 * 3600


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# What a reconcile function returns when it is sure the effect did not happen...
NOT_APPLIED: Any = _Marker("NOT_APPLIED")
# ...and when it cannot tell (the run then waits for an operator's repair).
UNKNOWN: Any = _Marker("UNKNOWN")


class EffectScope(Protocol):
    """What the ledger needs of the step it works for (a ``StepContext``)."""

    run_id: str
    flow: Flow
    step: str
    epoch: int
    checkpoint_id: str
    checkpoint_seq: int
    lease_seconds: float
    applied_effects: list[str]
    # Outcomes recorded by the step's next transaction (its commit, or another intent).
    pending_outcomes: list[Outcome]
    # The run's ledger as read (None until a step needs it).
    effects: dict[str, LedgerEntry] | None

    def ledger(self) -> dict[str, LedgerEntry]: ...

    def count(self, name: str, by: int = 1) -> None: ...


def as_json(value: Any, what: str, ctx: EffectScope, name: str) -> Any:
    try:
        return json_copy(value)
    except (TypeError, ValueError):
        raise EffectError(
            run_id=ctx.run_id, name=name, detail=f"{what} is not JSON: {type(value).__name__}"
        ) from None


def _request_hash(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return json_hash(json.loads(json.dumps([list(args), kwargs], default=repr)))


def perform(
    ctx: EffectScope,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    reconcile: Callable[[str], Any] | None,
    key: str | None,
    fencing_token: bool = True,
) -> Any:
    # The checkpoint sequence keeps a step that runs again in a loop from reusing old effects.
    key = key or f"{ctx.run_id}:{ctx.checkpoint_seq}:{ctx.step}:{name}"
    reconcile = reconcile or ctx.flow.reconcilers.get(name)
    if key in ctx.applied_effects:
        raise EffectError(run_id=ctx.run_id, name=name, detail="used twice in one execution")
    request_hash = _request_hash(args, kwargs)
    call = _Call(name, key, fn, args, kwargs, fencing_token)
    if ctx.effects is None:
        lease = _record_intent(ctx, name, key, request_hash, exists=False)
        if lease is not None:
            # Nothing read yet and the key was free: the common case costs one transaction.
            return _call(ctx, call, lease)
    entry = ctx.ledger().get(key)
    if entry is not None and entry.status == EffectStatus.APPLIED:
        ctx.count(EventKind.EFFECT_SKIPPED)
        ctx.applied_effects.append(key)
        return entry.receipt
    if entry is not None and entry.status == EffectStatus.INTENT:
        found, receipt = _settle_unknown(ctx, name, key, entry, reconcile)
        if found:
            mark_outcome(ctx, key, EffectStatus.APPLIED, receipt=receipt)
            ctx.applied_effects.append(key)
            return receipt
    lease = _record_intent(ctx, name, key, request_hash, exists=entry is not None)
    if lease is None:
        _key_taken(ctx, name, key)
    assert lease is not None
    return _call(ctx, call, lease)


@dataclass(frozen=True)
class _Call:
    name: str
    key: str
    fn: Callable[..., Any]
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    fencing_token: bool


def _call(ctx: EffectScope, call: _Call, lease: fencing.Lease) -> Any:
    """Call ``fn`` once its intent is durable; its outcome goes with the step's next write."""
    name, key = call.name, call.key
    try:
        fencing.check_margin(ctx, name, lease)
    except LeaseMarginError as exc:
        mark_outcome(ctx, key, EffectStatus.FAILED, error=str(exc))
        raise
    # The epoch goes with the call, so that a target can refuse a stale owner's late write.
    token = {"fencing_token": ctx.epoch} if call.fencing_token else {}
    try:
        receipt = call.fn(*call.args, idempotency_key=key, **token, **call.kwargs)
    except BaseException as exc:
        # Whatever stopped fn, the ledger says so before anything else happens (a run never
        # suspends with its own effect unrecorded).
        mark_outcome(ctx, key, EffectStatus.FAILED, error=f"{type(exc).__name__}: {exc}")
        if not isinstance(exc, Exception):
            raise EffectError(
                run_id=ctx.run_id, name=name, detail=f"interrupted by {type(exc).__name__}"
            ) from exc
        raise
    try:
        receipt = as_json(receipt, "the receipt", ctx, name)
    except EffectError as exc:
        # It happened all the same: say so, so that no later execution calls it again.
        mark_outcome(ctx, key, EffectStatus.APPLIED, error=str(exc))
        raise
    # Recorded with the step's commit (or its next intent): a crash before that leaves the
    # intent, which is reconciled like any other whose outcome is unknown.
    ctx.pending_outcomes.append(Outcome(key, EffectStatus.APPLIED, receipt))
    _remember(ctx, key, name, EffectStatus.APPLIED, receipt)
    ctx.applied_effects.append(key)
    return receipt


def _settle_unknown(
    ctx: EffectScope,
    name: str,
    key: str,
    entry: LedgerEntry,
    reconcile: Callable[[str], Any] | None,
) -> tuple[bool, Any]:
    """Decide an intent left without an outcome: (True, receipt) if it happened, else (False,)."""
    repair = _repair_for(ctx, name, entry)
    if repair is not None:
        if repair.outcome == "applied":
            ctx.count(EventKind.EFFECT_RECONCILED)
            return True, as_json(repair.receipt, "the repair receipt", ctx, name)
        return False, None
    # An older owner's call may still be in flight: let it land before anyone looks.
    stale_end = fencing.await_stale_owner(ctx, entry)
    verdict = UNKNOWN if reconcile is None else reconcile(key)
    if verdict is NOT_APPLIED:
        ctx.count(EventKind.EFFECT_RECONCILED)
        return False, None
    if verdict is not UNKNOWN and verdict is not None:
        ctx.count(EventKind.EFFECT_RECONCILED)
        return True, as_json(verdict, "the reconciled receipt", ctx, name)
    ctx.count(EventKind.REPAIR_RAISED)
    raise Suspend(
        declare(
            f"repair:{name}",
            kind=InterruptKind.REPAIR,
            input=RepairResolution,
            authority=list(ctx.flow.operator_roles),
            expires_in=REPAIR_EXPIRES_IN,
            evidence={
                "effect": name,
                "idempotency_key": key,
                "intent_epoch": entry.epoch,
                # The owner that left the intent; its call may land late (check the target).
                "stale_epoch": entry.epoch,
                "stale_lease_ended_at": stale_end and stale_end.isoformat(),
            },
            reason=f"outcome of effect {name!r} is unknown and cannot be reconciled",
        )
    )


def _repair_for(ctx: EffectScope, name: str, entry: LedgerEntry) -> RepairResolution | None:
    """The operator's accepted finding on this very intent, if one was given.

    A finding answers for the intent it was raised on (its epoch is in the evidence): when
    the effect was called again after a "not applied" and its outcome is unknown once more,
    the old finding says nothing about the new call.
    """
    with transaction(readonly=True) as session:
        rows = interrupt_store.resolved_at(
            session, ctx.run_id, ctx.checkpoint_id, name=f"repair:{name}"
        )
        findings = [(row.decision, row.resume_input, row.evidence) for row in rows]
    for decision, resume_input, evidence in findings:
        if not isinstance(evidence, dict) or evidence.get("idempotency_key") != entry.key:
            continue
        if evidence.get("intent_epoch") != entry.epoch:
            continue
        if decision != Decision.APPROVED.value:
            raise EffectError(run_id=ctx.run_id, name=name, detail="repair was rejected")
        return RepairResolution.model_validate(resume_input or {})
    return None


def _record_intent(
    ctx: EffectScope, name: str, key: str, request_hash: str, *, exists: bool
) -> fencing.Lease | None:
    """Commit the intent (with any outcome still pending) and renew the lease; None if a new
    key was taken."""
    # One write in the common case (a new key, no outcome pending): its own transaction.
    with transaction(autocommit=not (exists or ctx.pending_outcomes)) as session:
        renewal: Write | None = None
        if exists or ctx.pending_outcomes:
            lease = fencing.renew_for_call(session, ctx)
            if ctx.pending_outcomes:
                store.record_outcomes(
                    session, run_id=ctx.run_id, epoch=ctx.epoch, outcomes=ctx.pending_outcomes
                )
        else:
            # The common case, one statement: the renewal rides with the intent, which is
            # written only while the lease is ours (a stale owner is told by _key_taken).
            lease, renewal = fencing.renewal_for_call(ctx)
        written = store.record_intent(
            session,
            run_id=ctx.run_id,
            epoch=ctx.epoch,
            step=ctx.step,
            name=name,
            key=key,
            request_hash=request_hash,
            exists=exists,
            renew=renewal,
        )
    ctx.pending_outcomes.clear()
    if not written:
        return None
    _remember(ctx, key, name, EffectStatus.INTENT, None)
    return lease


def _key_taken(ctx: EffectScope, name: str, key: str) -> None:
    """Why a new intent was not written: a stale owner, or a key another run holds."""
    with transaction(readonly=True) as session:
        owner = store.key_owner(session, key)
    if owner is None or owner == ctx.run_id:
        raise FencedError(run_id=ctx.run_id, epoch=ctx.epoch)
    # Only a caller-chosen key can collide: another run already used it.
    raise EffectError(
        run_id=ctx.run_id, name=name, detail=f"idempotency key {key!r} belongs to another run"
    )


def _remember(ctx: EffectScope, key: str, name: str, status: EffectStatus, receipt: Any) -> None:
    if ctx.effects is not None:
        ctx.effects[key] = LedgerEntry(key, name, status.value, receipt, ctx.epoch)


def mark_outcome(
    ctx: EffectScope,
    key: str,
    status: EffectStatus,
    *,
    receipt: Any = None,
    error: str | None = None,
) -> None:
    """Record what became of an effect, fenced: a stale owner gets FencedError, writes nothing."""
    with transaction() as session:
        store.record_outcomes(
            session,
            run_id=ctx.run_id,
            epoch=ctx.epoch,
            outcomes=[Outcome(key, status, receipt, error)],
        )
    ledger = ctx.ledger()
    name = ledger[key].name if key in ledger else ""
    ledger[key] = LedgerEntry(key, name, status.value, receipt, ctx.epoch)
