"""Settling a resuming run's pending effects before its step executes again."""

from __future__ import annotations

import logging

from models.enums import EffectStatus, EventKind
from worker.engine.effects import NOT_APPLIED, UNKNOWN, EffectScope, as_json, mark_outcome
from worker.engine.fencing import await_stale_owner

log = logging.getLogger(__name__)


def settle_pending_effects(ctx: EffectScope) -> None:
    """Ask the flow's registered reconcilers about every effect left in ``intent``.

    A receipt marks it applied; NOT_APPLIED marks it failed (so the step calls it again);
    UNKNOWN, or no reconciler, leaves it for the step, which raises a ``repair`` interrupt.
    An intent of an older owner is looked at only once its lease expired plus the grace.
    """
    for key, entry in list(ctx.ledger().items()):
        if entry.status != EffectStatus.INTENT:
            continue
        reconcile = ctx.flow.reconcilers.get(entry.name)
        if reconcile is None:
            continue
        # An older owner's call may still be in flight: let it land before asking.
        await_stale_owner(ctx, entry)
        verdict = reconcile(key)
        if verdict is UNKNOWN or verdict is None:
            continue
        ctx.count(EventKind.EFFECT_RECONCILED)
        if verdict is NOT_APPLIED:
            mark_outcome(ctx, key, EffectStatus.FAILED, error="reconciled: not applied")
        else:
            receipt = as_json(verdict, "the reconciled receipt", ctx, entry.name)
            mark_outcome(ctx, key, EffectStatus.APPLIED, receipt=receipt)
        log.info("effect reconciled", extra={"action": "reconcile", "run_id": ctx.run_id})
