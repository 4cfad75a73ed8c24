"""The effect ledger: intent is committed before the call, the outcome right after it.

A step may execute again; an effect recorded ``applied`` returns its receipt without being
called again, and an ``intent`` whose outcome is unknown (the process died in between) is
reconciled before the step continues, or handed to an operator as a ``repair`` interrupt.
A key stands for one call of one effect: used again with other arguments (the request hash
differs) or by another effect, it fails the step for good instead of returning the other
call's receipt. Every ledger write is fenced on the step's lease epoch, which ``fn``
receives as ``fencing_token=`` to pass on to systems that refuse stale tokens
(``worker.engine.fencing`` has the lease margin and the grace that keep a frozen owner's late call
apart from a new owner's).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from models import canonical
from models import effects as effect_store
from models import interrupts as interrupt_store
from models.contracts import json_copy
from models.db import transaction
from models.effects import LedgerEntry, Outcome
from models.enums import Decision, EffectStatus, EventKind, InterruptKind
from models.errors import EffectError, FencedError, LeaseMarginError
from models.statements import Write
from models.storable import storable_copy, storable_text, unstorable_where
from worker.engine import fencing
from worker.flows.declarations import Suspend, declare
from worker.flows.flow import Flow
from worker.flows.schemas import RepairResolution

log = logging.getLogger(__name__)
REPAIR_EXPIRES_IN = 7 * 24 * 3600
# The ledger's columns: an effect's name and its idempotency key are at most this long.
MAX_NAME = 200
MAX_KEY = 400


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
    # When the lease ends as this execution last wrote it (``fencing.LeaseHolder``).
    lease_expires_at: datetime | None
    applied_effects: list[str]
    # Outcomes recorded by the step's next transaction (its commit, or another intent).
    pending_outcomes: list[Outcome]
    # The run's ledger as read (None until a step needs it).
    effects: dict[str, LedgerEntry] | None

    def ledger(self) -> dict[str, LedgerEntry]: ...

    def count(self, name: str, by: int = 1) -> None: ...


def as_json(value: Any, what: str, ctx: EffectScope, name: str) -> Any:
    """``value`` as the ledger will store it, or EffectError: JSON that either database keeps
    (PostgreSQL refuses NUL and lone surrogates at the commit; SQLite would keep them)."""
    try:
        copy = json_copy(value)
    except (TypeError, ValueError, RecursionError):
        raise EffectError(
            run_id=ctx.run_id, name=name, detail=f"{what} is not JSON: {type(value).__name__}"
        ) from None
    where = unstorable_where(copy)
    if where is not None:
        raise EffectError(
            run_id=ctx.run_id,
            name=name,
            detail=f"{what} holds NUL or unpaired surrogate characters{where}",
        )
    return copy


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
    name = _checked_name(ctx, name)
    key = _checked_key(ctx, name, key)
    reconcile = reconcile or ctx.flow.reconcilers.get(name)
    if key in ctx.applied_effects:
        raise EffectError(run_id=ctx.run_id, name=name, detail="used twice in one execution")
    request_hash = canonical.request_hash(args, kwargs)
    call = _Call(name, key, fn, args, kwargs, fencing_token)
    if ctx.effects is None:
        lease = _record_intent(ctx, name, key, request_hash, exists=False)
        if lease is not None:
            # Nothing read yet and the key was free: the common case costs one transaction.
            return _call(ctx, call, lease)
    entry = ctx.ledger().get(key)
    if entry is not None and entry.name != name:
        raise EffectError(
            run_id=ctx.run_id,
            name=_shown(name),
            detail=f"idempotency key {_shown(key)!r} belongs to effect {_shown(entry.name)!r} "
            "of this run: a key stands for one call of one effect",
        )
    if entry is not None and entry.status == EffectStatus.APPLIED:
        # The recorded receipt is this call's only if the call is the same.
        _same_request(ctx, name, key, entry, request_hash)
        ctx.count(EventKind.EFFECT_SKIPPED)
        ctx.applied_effects.append(key)
        return entry.receipt
    if entry is not None and entry.status == EffectStatus.INTENT:
        found, receipt = _settle_unknown(ctx, name, key, entry, reconcile)
        if found:
            mark_outcome(ctx, key, EffectStatus.APPLIED, receipt=receipt)
            # (Recorded all the same: the call that was made did happen.)
            _same_request(ctx, name, key, entry, request_hash)
            ctx.applied_effects.append(key)
            return receipt
    lease = _record_intent(ctx, name, key, request_hash, exists=entry is not None)
    if lease is None:
        _key_taken(ctx, name, key)
    assert lease is not None
    return _call(ctx, call, lease)


def _shown(text: str) -> str:
    """``text`` cut short for a message (which quotes it with repr, escaping what it holds)."""
    return text if len(text) <= 60 else text[:60] + "..."


def _checked_name(ctx: EffectScope, name: object) -> str:
    """``name`` if the ledger can keep it: a non-empty str of storable text, short enough."""
    if not isinstance(name, str) or not name:
        given = (
            "an empty name" if isinstance(name, str) else f"a name of type {type(name).__name__}"
        )
        raise EffectError(
            f"an effect of run {ctx.run_id} was given {given}: an effect's name is a non-empty "
            f"str (at most {MAX_NAME} characters)"
        )
    _kept_as_is(ctx, name, "the name", name, MAX_NAME)
    return name


def _checked_key(ctx: EffectScope, name: str, key: object) -> str:
    """The effect's idempotency key: ``key``, or the default one; EffectError unless the
    ledger can keep it."""
    if key is None:
        # The checkpoint sequence keeps a step that runs again in a loop from reusing old
        # effects.
        key = f"{ctx.run_id}:{ctx.checkpoint_seq}:{ctx.step}:{name}"
        if len(key) > MAX_KEY:
            raise EffectError(
                run_id=ctx.run_id,
                name=_shown(name),
                detail=f"its default idempotency key (run:checkpoint:step:name) is {len(key)} "
                f"characters long, more than {MAX_KEY}: shorten the name, or pass key=",
            )
        return key
    if not isinstance(key, str) or not key:
        given = "empty" if isinstance(key, str) else f"of type {type(key).__name__}"
        raise EffectError(
            run_id=ctx.run_id,
            name=_shown(name),
            detail=f"key= is {given}: an idempotency key is a non-empty str (at most "
            f"{MAX_KEY} characters), or left out for the default key",
        )
    _kept_as_is(ctx, name, "the idempotency key", key, MAX_KEY)
    return key


def _kept_as_is(ctx: EffectScope, name: str, what: str, text: str, longest: int) -> None:
    """EffectError unless the ledger's column keeps ``text`` as it is (storable, short enough)."""
    if not storable_text(text):
        raise EffectError(
            run_id=ctx.run_id,
            name=_shown(name),
            detail=f"{what} holds NUL or unpaired surrogate characters",
        )
    if len(text) > longest:
        raise EffectError(
            run_id=ctx.run_id,
            name=_shown(name),
            detail=f"{what} is {len(text)} characters long, more than {longest}",
        )


def _same_request(
    ctx: EffectScope, name: str, key: str, entry: LedgerEntry, request_hash: str
) -> None:
    """EffectError unless the call recorded under ``key`` had the same arguments: a key used
    again with others would get another call's receipt (a programming error, not retried)."""
    recorded = entry.request_hash
    if (
        recorded is None
        or not recorded.startswith(canonical.REQUEST_HASH)
        or recorded == request_hash
    ):
        return
    raise EffectError(
        run_id=ctx.run_id,
        name=_shown(name),
        detail="called again with other arguments than its recorded call (idempotency key "
        f"{_shown(key)!r}): a step must pass the same arguments every time it runs, or "
        "another key",
    )


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
        error = storable_copy(f"{type(exc).__name__}: {exc}")
        mark_outcome(ctx, key, EffectStatus.FAILED, error=error)
        if not isinstance(exc, Exception):
            raise EffectError(
                run_id=ctx.run_id, name=name, detail=f"interrupted by {type(exc).__name__}"
            ) from exc
        raise
    try:
        receipt = as_json(receipt, "the receipt", ctx, name)
    except EffectError as exc:
        # It happened, but its receipt cannot be kept. Recorded applied without it, a later
        # execution would go on with None; so its outcome stays unknown (intent, saying why):
        # a later execution asks the reconciler, or an operator in a repair, for the receipt,
        # as after a crash, and calls fn again only if they find it did not happen.
        mark_outcome(ctx, key, EffectStatus.INTENT, error=str(exc))
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
    """Commit the intent (with any outcome still pending), renewing the lease unless it is
    fresh; None if a new key was taken."""
    # A lease claimed or renewed less than a third of it ago is not renewed: every write here
    # is fenced on the epoch by itself, and the lease keeper renews it later in any case.
    lease = fencing.fresh_lease(ctx)
    # One write in the common case (a new key, no outcome pending): its own transaction.
    with transaction(autocommit=not (exists or ctx.pending_outcomes)) as session:
        renewal: Write | None = None
        if exists or ctx.pending_outcomes:
            if lease is None:
                lease = fencing.renew_for_call(session, ctx)
            if ctx.pending_outcomes:
                effect_store.record_outcomes(
                    session, run_id=ctx.run_id, epoch=ctx.epoch, outcomes=ctx.pending_outcomes
                )
        elif lease is None:
            # The common case, one statement: the renewal rides with the intent, which is
            # written only while the lease is ours (a stale owner is told by _key_taken).
            lease, renewal = fencing.renewal_for_call(ctx)
        written = effect_store.record_intent(
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
    ctx.lease_expires_at = lease.expires_at
    _remember(ctx, key, name, EffectStatus.INTENT, None, request_hash)
    return lease


def _key_taken(ctx: EffectScope, name: str, key: str) -> None:
    """Why a new intent was not written: a stale owner, or a key another run holds."""
    with transaction(readonly=True) as session:
        owner = effect_store.key_owner(session, key)
    if owner is None or owner == ctx.run_id:
        raise FencedError(run_id=ctx.run_id, epoch=ctx.epoch)
    # Only a caller-chosen key can collide: another run already used it.
    raise EffectError(
        run_id=ctx.run_id, name=name, detail=f"idempotency key {key!r} belongs to another run"
    )


def _remember(
    ctx: EffectScope,
    key: str,
    name: str,
    status: EffectStatus,
    receipt: Any,
    request_hash: str | None = None,
) -> None:
    if ctx.effects is not None:
        known = ctx.effects.get(key)
        if request_hash is None and known is not None:
            request_hash = known.request_hash
        ctx.effects[key] = LedgerEntry(key, name, status.value, receipt, ctx.epoch, request_hash)


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
        effect_store.record_outcomes(
            session,
            run_id=ctx.run_id,
            epoch=ctx.epoch,
            outcomes=[Outcome(key, status, receipt, error)],
        )
    ledger = ctx.ledger()
    known = ledger.get(key)
    name, request_hash = (known.name, known.request_hash) if known is not None else ("", None)
    ledger[key] = LedgerEntry(key, name, status.value, receipt, ctx.epoch, request_hash)
