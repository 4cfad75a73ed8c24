"""The effects store: the ledger rows of a run's external side effects.

Every write is fenced on the writer's lease epoch in the same transaction (``assert_owner``),
so a worker that lost its run cannot record an intent or an outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sqlalchemy import Table, insert, select, update
from sqlalchemy.orm import Session

from models.db import utcnow
from models.enums import EffectStatus
from models.runs import assert_owner
from models.tables import Effect

EFFECTS: Table = Effect.__table__  # type: ignore[assignment]


@dataclass(frozen=True)
class LedgerEntry:
    key: str
    name: str
    status: str
    receipt: Any
    epoch: int


def load_ledger(session: Session, run_id: str) -> dict[str, LedgerEntry]:
    rows = session.execute(
        select(
            Effect.idempotency_key, Effect.name, Effect.status, Effect.receipt, Effect.epoch
        ).where(Effect.run_id == run_id)
    ).all()
    return {r[0]: LedgerEntry(*r) for r in rows}


def record_intent(
    session: Session,
    *,
    run_id: str,
    epoch: int,
    step: str,
    name: str,
    key: str,
    request_hash: str,
    exists: bool,
) -> None:
    """``intent`` for ``key``, fenced on ``epoch``; another run's key raises IntegrityError."""
    assert_owner(session, run_id, epoch)
    now = utcnow()
    if exists:
        session.execute(
            update(EFFECTS)
            .where(EFFECTS.c.idempotency_key == key, EFFECTS.c.run_id == run_id)
            .values(
                status=EffectStatus.INTENT.value,
                epoch=epoch,
                request_hash=request_hash,
                error=None,
                updated_at=now,
            )
        )
        return
    session.execute(
        insert(EFFECTS).values(
            run_id=run_id,
            step=step,
            name=name,
            idempotency_key=key,
            epoch=epoch,
            request_hash=request_hash,
            status=EffectStatus.INTENT.value,
            created_at=now,
            updated_at=now,
        )
    )


def record_outcome(
    session: Session,
    *,
    run_id: str,
    epoch: int,
    key: str,
    status: EffectStatus,
    receipt: Any = None,
    error: str | None = None,
) -> None:
    """What became of the effect ``key``, fenced: a stale owner gets FencedError, writes nothing."""
    assert_owner(session, run_id, epoch)
    session.execute(
        update(EFFECTS)
        .where(EFFECTS.c.idempotency_key == key, EFFECTS.c.run_id == run_id)
        .values(status=status.value, receipt=receipt, error=error, epoch=epoch, updated_at=utcnow())
    )
