"""The effect ledger: intent is committed before the call, the outcome right after it.

A step may execute again; an effect recorded ``applied`` returns its receipt without being
called again, and an ``intent`` whose outcome is unknown (the process died in between) is
reconciled before the step continues, or handed to an operator as a ``repair`` interrupt.
Every ledger write is fenced on the step's lease epoch (``ctx.epoch``), which ``fn`` may also
pass on to systems that accept fencing tokens.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import repository
from models.contracts import evidence_hash
from models.db import transaction, utcnow
from models.enums import Decision, EffectStatus, InterruptKind, InterruptStatus
from models.errors import EffectError
from models.tables import Effect, Interrupt
from worker.schemas import RepairResolution

if TYPE_CHECKING:
    from worker.context import StepContext

log = logging.getLogger(__name__)


class _Marker:
    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return self.name


# What a reconcile function returns when it is sure the effect did not happen...
NOT_APPLIED: Any = _Marker("NOT_APPLIED")
# ...and when it cannot tell (the run then waits for an operator's repair).
UNKNOWN: Any = _Marker("UNKNOWN")


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    name: str
    status: str
    receipt: Any
    epoch: int


def load_ledger(session: Any, run_id: str) -> dict[str, LedgerEntry]:
    rows = session.execute(
        select(
            Effect.idempotency_key, Effect.name, Effect.status, Effect.receipt, Effect.epoch
        ).where(Effect.run_id == run_id)
    ).all()
    return {r[0]: LedgerEntry(*r) for r in rows}


def as_json(value: Any, what: str, ctx: StepContext, name: str) -> Any:
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError):
        raise EffectError(
            run_id=ctx.run_id, name=name, detail=f"{what} is not JSON: {type(value).__name__}"
        ) from None


def _request_hash(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    return evidence_hash(json.loads(json.dumps([list(args), kwargs], default=repr)))


def perform(
    ctx: StepContext,
    name: str,
    fn: Callable[..., Any],
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    *,
    reconcile: Callable[[str], Any] | None,
    key: str | None,
) -> Any:
    # The checkpoint sequence keeps a step that runs again in a loop from reusing old effects.
    key = key or f"{ctx.run_id}:{ctx.checkpoint_seq}:{ctx.step}:{name}"
    reconcile = reconcile or ctx.flow.reconcilers.get(name)
    if key in ctx.applied_effects:
        raise EffectError(run_id=ctx.run_id, name=name, detail="used twice in one execution")
    entry = ctx.ledger().get(key)
    if entry is not None and entry.status == EffectStatus.APPLIED:
        ctx.count("effect_skipped")
        ctx.applied_effects.append(key)
        return entry.receipt
    if entry is not None and entry.status == EffectStatus.INTENT:
        found, receipt = _settle_unknown(ctx, name, key, entry, reconcile)
        if found:
            mark_outcome(ctx, key, EffectStatus.APPLIED, receipt=receipt)
            ctx.applied_effects.append(key)
            return receipt
    request_hash = _request_hash(args, kwargs)
    _record_intent(ctx, name, key, request_hash, exists=entry is not None)
    try:
        receipt = fn(*args, idempotency_key=key, **kwargs)
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
    mark_outcome(ctx, key, EffectStatus.APPLIED, receipt=receipt)
    ctx.applied_effects.append(key)
    return receipt


def _settle_unknown(
    ctx: StepContext,
    name: str,
    key: str,
    entry: LedgerEntry,
    reconcile: Callable[[str], Any] | None,
) -> tuple[bool, Any]:
    """Decide an intent left without an outcome: (True, receipt) if it happened, else (False,)."""
    from worker.context import Suspend, build_spec

    repair = _repair_for(ctx, name, entry)
    if repair is not None:
        if repair.outcome == "applied":
            ctx.count("effect_reconciled")
            return True, as_json(repair.receipt, "the repair receipt", ctx, name)
        return False, None
    verdict = UNKNOWN if reconcile is None else reconcile(key)
    if verdict is NOT_APPLIED:
        ctx.count("effect_reconciled")
        return False, None
    if verdict is not UNKNOWN and verdict is not None:
        ctx.count("effect_reconciled")
        return True, as_json(verdict, "the reconciled receipt", ctx, name)
    ctx.count("repair_raised")
    raise Suspend(
        build_spec(
            f"repair:{name}",
            kind=InterruptKind.REPAIR,
            model=RepairResolution,
            authority=list(ctx.flow.operator_roles),
            expires_in=7 * 24 * 3600,
            evidence={"effect": name, "idempotency_key": key, "intent_epoch": entry.epoch},
            reason=f"outcome of effect {name!r} is unknown and cannot be reconciled",
        )
    )


def _repair_for(ctx: StepContext, name: str, entry: LedgerEntry) -> RepairResolution | None:
    """The operator's accepted finding on this very intent, if one was given.

    A finding answers for the intent it was raised on (its epoch is in the evidence): when
    the effect was called again after a "not applied" and its outcome is unknown once more,
    the old finding says nothing about the new call.
    """
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(Interrupt.decision, Interrupt.resume_input, Interrupt.evidence).where(
                Interrupt.run_id == ctx.run_id,
                Interrupt.checkpoint_id == ctx.checkpoint_id,
                Interrupt.name == f"repair:{name}",
                Interrupt.status == InterruptStatus.RESOLVED.value,
            )
        ).all()
    for decision, resume_input, evidence in rows:
        if not isinstance(evidence, dict) or evidence.get("idempotency_key") != entry.key:
            continue
        if evidence.get("intent_epoch") != entry.epoch:
            continue
        if decision != Decision.APPROVED.value:
            raise EffectError(run_id=ctx.run_id, name=name, detail="repair was rejected")
        return RepairResolution.model_validate(resume_input or {})
    return None


def _record_intent(ctx: StepContext, name: str, key: str, request_hash: str, exists: bool) -> None:
    now = utcnow()
    try:
        with transaction() as session:
            repository.assert_owner(session, ctx.run_id, ctx.epoch)
            _write_intent(session, ctx, name, key, request_hash, exists, now)
    except IntegrityError:
        # Only a caller-chosen key can collide: another run already used it.
        raise EffectError(
            run_id=ctx.run_id, name=name, detail=f"idempotency key {key!r} belongs to another run"
        ) from None
    ctx.ledger()[key] = LedgerEntry(key, name, EffectStatus.INTENT.value, None, ctx.epoch)


def _write_intent(
    session: Session,
    ctx: StepContext,
    name: str,
    key: str,
    request_hash: str,
    exists: bool,
    now: datetime,
) -> None:
    if exists:
        session.execute(
            update(Effect)
            .where(Effect.idempotency_key == key, Effect.run_id == ctx.run_id)
            .values(
                status=EffectStatus.INTENT.value,
                epoch=ctx.epoch,
                request_hash=request_hash,
                error=None,
                updated_at=now,
            )
        )
        return
    session.add(
        Effect(
            run_id=ctx.run_id,
            step=ctx.step,
            name=name,
            idempotency_key=key,
            epoch=ctx.epoch,
            request_hash=request_hash,
            status=EffectStatus.INTENT.value,
            created_at=now,
            updated_at=now,
        )
    )
    # Flush inside the fenced transaction so that a colliding key fails here, not at commit.
    session.flush()


def mark_outcome(
    ctx: StepContext,
    key: str,
    status: EffectStatus,
    *,
    receipt: Any = None,
    error: str | None = None,
) -> None:
    """Record what became of an effect, fenced: a stale owner gets FencedError, writes nothing."""
    with transaction() as session:
        repository.assert_owner(session, ctx.run_id, ctx.epoch)
        session.execute(
            update(Effect)
            .where(Effect.idempotency_key == key, Effect.run_id == ctx.run_id)
            .values(
                status=status.value,
                receipt=receipt,
                error=error,
                epoch=ctx.epoch,
                updated_at=utcnow(),
            )
        )
    ledger = ctx.ledger()
    name = ledger[key].name if key in ledger else ""
    ledger[key] = LedgerEntry(key, name, status.value, receipt, ctx.epoch)
