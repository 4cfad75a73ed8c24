"""The effects store: the ledger rows of a run's external side effects.

Every write is fenced on the writer's lease epoch in the same transaction (``assert_owner``),
so a worker that lost its run cannot record an intent or an outcome.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy import exists as sql_exists
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.claims import assert_owner
from models.db import dialect, utcnow
from models.dialects import Dialect
from models.enums import EffectStatus, RunState
from models.errors import FencedError
from models.runs import RUNS
from models.scope import Scope
from models.statements import Write, named, only_if, param, row_values
from models.tables import Effect

EFFECTS: Table = Effect.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    name: str
    status: str
    receipt: Any
    epoch: int
    # What the call was made with (``worker.engine.effects``): a key used again must match it.
    request_hash: str | None = None


def load_ledger(session: Scope, run_id: str) -> dict[str, LedgerEntry]:
    rows = dialect(session).run(session, EFFECT_LEDGER, (), {"run_id": run_id}).all()
    return {r[0]: LedgerEntry(*r) for r in rows}


@named("effect.ledger")
def EFFECT_LEDGER(d: Dialect) -> Any:
    """Read a run's effects: key, name, status, receipt, epoch, request hash (``load_ledger``:
    a step whose run has unsettled effects, at its claim; ``ctx.effect`` at its first call)."""
    return select(
        EFFECTS.c.idempotency_key,
        EFFECTS.c.name,
        EFFECTS.c.status,
        EFFECTS.c.receipt,
        EFFECTS.c.epoch,
        EFFECTS.c.request_hash,
    ).where(EFFECTS.c.run_id == bindparam("run_id"))


def _owned(d: Dialect, run_id: Any, epoch: Any) -> Any:
    """``EXISTS``: the run still runs under ``epoch``; the row is held until commit, so a
    reclaim cannot slip in between this write and its commit."""
    fence = select(RUNS.c.id).where(
        RUNS.c.id == run_id, RUNS.c.lease_epoch == epoch, RUNS.c.state == RunState.RUNNING
    )
    return sql_exists(d.lock_shared(fence))


def record_intent(
    session: Scope,
    *,
    run_id: str,
    epoch: int,
    step: str,
    name: str,
    key: str,
    request_hash: str,
    exists: bool,
    renew: Write | None = None,
) -> bool:
    """``intent`` for ``key``, fenced on ``epoch``, in one statement.

    A new key is inserted unless taken: False then (taken by this run, by another run, or the
    fence failed; ``key_owner`` tells which); ``renew`` (the owner's lease renewal, when it is
    due) rides along with it, in the same round trip. A known key of this run is set back to
    ``intent``; a stale owner gets FencedError.
    """
    now = utcnow()
    if exists:
        params = {
            "of_key": key,
            "of_run": run_id,
            "held_epoch": epoch,
            "new_request_hash": request_hash,
            "now": now,
        }
        if dialect(session).run(session, EFFECT_INTENT_AGAIN, (), params).rowcount != 1:
            raise FencedError(run_id=run_id, epoch=epoch)
        return True
    values: dict[str, Any] = {
        "run_id": run_id,
        "step": step,
        "name": name,
        "idempotency_key": key,
        "epoch": epoch,
        "request_hash": request_hash,
        "status": EffectStatus.INTENT.value,
        "created_at": now,
        "updated_at": now,
    }
    intent = Write(EFFECT_INTENT, (), {f"new_{k}": v for k, v in values.items()})
    written = dialect(session).execute_with(session, intent, [renew] if renew is not None else [])
    return written.first() is not None


@named("effect.intent", ride=True)
def EFFECT_INTENT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Record a new effect key in ``intent`` unless it is taken, only while the run runs
    under the writer's epoch, returning its id; the lease renewal rides along once a third of
    the lease has passed (``record_intent``: ``ctx.effect`` before it calls ``fn``)."""
    row = select(*(param(EFFECTS, k, f"{prefix}new_{k}") for k in INTENT_COLUMNS))
    fence = d.lock_shared(
        select(RUNS.c.id).where(
            RUNS.c.id == bindparam(f"{prefix}new_run_id"),
            RUNS.c.lease_epoch == bindparam(f"{prefix}new_epoch"),
            RUNS.c.state == RunState.RUNNING,
        )
    )
    row = row.where(sql_exists(fence))
    if guard is not None:
        row = row.select_from(guard)
    return (
        d.insert_unless_present(EFFECTS, "idempotency_key")
        .from_select(list(INTENT_COLUMNS), row)
        .returning(EFFECTS.c.id)
    )


@named("effect.intent_again")
def EFFECT_INTENT_AGAIN(d: Dialect) -> Any:
    """Set a known effect of a run back to ``intent``, only while the run runs under the
    writer's epoch (``record_intent``: ``ctx.effect`` calling again after "not applied")."""
    return (
        update(EFFECTS)
        .where(
            EFFECTS.c.idempotency_key == bindparam("of_key"),
            EFFECTS.c.run_id == bindparam("of_run"),
            _owned(d, bindparam("of_run"), bindparam("held_epoch")),
        )
        .values(
            status=EffectStatus.INTENT.value,
            epoch=bindparam("held_epoch"),
            request_hash=bindparam("new_request_hash"),
            error=None,
            updated_at=bindparam("now", type_=EFFECTS.c.updated_at.type),
        )
    )


INTENT_COLUMNS = (
    "run_id",
    "step",
    "name",
    "idempotency_key",
    "epoch",
    "request_hash",
    "status",
    "created_at",
    "updated_at",
)


def key_owner(session: Session, key: str) -> str | None:
    """The run that holds effect key ``key``, if any."""
    found = session.execute(dialect(session).built(EFFECT_KEY_OWNER), {"key": key}).first()
    return None if found is None else str(found.run_id)


@named("effect.key_owner")
def EFFECT_KEY_OWNER(d: Dialect) -> Any:
    """Find the run that holds an effect key (``key_owner``: ``ctx.effect`` whose new key was
    taken, to tell a key used by another run from a lost fence)."""
    return select(Effect.run_id).where(Effect.idempotency_key == bindparam("key"))


@dataclass(frozen=True)
class Outcome:
    """What became of one effect: applied (with its receipt) or failed (with the error)."""

    key: str
    status: EffectStatus
    receipt: Any = None
    error: str | None = None


def record_outcomes(
    session: Scope, *, run_id: str, epoch: int, outcomes: Sequence[Outcome]
) -> None:
    """Outcomes of this run's effects, fenced: a stale owner gets FencedError, writes nothing."""
    assert_owner(session, run_id, epoch)
    for write in outcome_writes(run_id=run_id, epoch=epoch, outcomes=outcomes):
        dialect(session).execute(session, write)


OUTCOME_COLUMNS = ("status", "receipt", "error", "epoch", "updated_at")


@named("effect.outcome", ride=True)
def EFFECT_OUTCOME(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Record what became of an effect (applied with its receipt, or failed), riding along
    the step's commit, fenced by its move (``outcome_writes``; ``record_outcomes`` when an
    intent finds outcomes still pending)."""
    return (
        only_if(update(EFFECTS), guard)
        .where(
            EFFECTS.c.idempotency_key == bindparam(prefix + "key"),
            EFFECTS.c.run_id == bindparam(prefix + "run_id"),
        )
        .values(row_values(EFFECTS, OUTCOME_COLUMNS, prefix))
    )


def outcome_writes(*, run_id: str, epoch: int, outcomes: Sequence[Outcome]) -> list[Write]:
    """The UPDATEs recording ``outcomes``, to go with a step's commit: its run update, fenced
    on ``epoch``, is what keeps a stale owner from writing them."""
    now = utcnow()
    return [
        Write(
            EFFECT_OUTCOME,
            (),
            {
                "key": outcome.key,
                "run_id": run_id,
                "status": outcome.status.value,
                "receipt": outcome.receipt,
                "error": outcome.error,
                "epoch": epoch,
                "updated_at": now,
            },
        )
        for outcome in outcomes
    ]
