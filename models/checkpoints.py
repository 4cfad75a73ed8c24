"""The checkpoints store: a run's checkpoints, appended with the move that commits each and
read back, and the values a step remembered kept on its checkpoint."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, select, update
from sqlalchemy.orm import Session
from sqlalchemy.sql import FromClause
from sqlalchemy.sql.dml import UpdateBase

from models.db import dialect, utcnow
from models.dialects import Dialect
from models.scope import Scope
from models.statements import Write, insert_row, named, only_if
from models.storable import new_id
from models.tables import Checkpoint, Run, loaded

CHECKPOINTS: Table = Checkpoint.__table__  # type: ignore[assignment]
CHECKPOINT_COLUMNS = tuple(column.key for column in CHECKPOINTS.columns)


def latest_checkpoint(session: Session, run: Run) -> Checkpoint:
    params = {"run_id": run.id, "seq": run.checkpoint_seq}
    checkpoint: Checkpoint = session.execute(
        dialect(session).built(CHECKPOINT_LATEST), params
    ).scalar_one()
    return checkpoint


@named("checkpoint.latest")
def CHECKPOINT_LATEST(d: Dialect) -> Any:
    """Read a run's checkpoint of one sequence, its latest (``latest_checkpoint``: a run's
    view for operators and the API)."""
    return select(Checkpoint).where(
        Checkpoint.run_id == bindparam("run_id"), Checkpoint.seq == bindparam("seq")
    )


def get_checkpoint(session: Session, checkpoint_id: str) -> Checkpoint | None:
    return session.get(Checkpoint, checkpoint_id)


def new_checkpoint(
    run: Run,
    *,
    step: str | None,
    next_step: str | None,
    state: Any,
    budget_consumed: float,
    effects: list[str],
    epoch: int,
    remembered: dict[str, Any] | None = None,
    started_at: datetime | None = None,
) -> Checkpoint:
    """The checkpoint following the run's latest; the caller adds it with the transition."""
    return loaded(
        Checkpoint,
        {
            "id": new_id(),
            "run_id": run.id,
            "seq": run.checkpoint_seq + 1,
            "step": step,
            "next_step": next_step,
            "state": state,
            "budget_consumed": budget_consumed,
            "effects": effects,
            "epoch": epoch,
            "created_at": utcnow(),
            "remembered": remembered,
            "started_at": started_at,
        },
    )


def remembered_write(checkpoint_id: str, remembered: dict[str, Any]) -> Write:
    """The UPDATE that keeps a step's remembered values on its checkpoint (``ctx.remember``).

    The one change a checkpoint takes after its insert: values the step computed there for
    the first time, added before it waits, so its next execution at that checkpoint (after
    the answer) reads them instead of computing them again. ``remembered`` holds the earlier
    values too, unchanged. Rides along the run's suspend.
    """

    return Write(CHECKPOINT_REMEMBER, (), {"kept_at": checkpoint_id, "kept": remembered})


@named("checkpoint.remember", ride=True)
def CHECKPOINT_REMEMBER(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Keep a step's remembered values on its checkpoint, riding along the run's suspend
    (``remembered_write``: ``ctx.remember`` before the step waits)."""
    keep = update(CHECKPOINTS).where(CHECKPOINTS.c.id == bindparam(prefix + "kept_at"))
    return only_if(keep, guard).values(
        remembered=bindparam(prefix + "kept", type_=CHECKPOINTS.c.remembered.type)
    )


def checkpoint_insert(session: Scope, checkpoint: Checkpoint) -> Write:
    """The INSERT appending ``checkpoint``, to go with the transition that commits it.

    It writes nothing when the sequence is taken: only when another owner committed it first,
    and then that transition's compare-and-set fails too, and says why.
    """
    values = {column: getattr(checkpoint, column) for column in CHECKPOINT_COLUMNS}
    return Write(CHECKPOINT_INSERT, (), values)


@named("checkpoint.insert", ride=True)
def CHECKPOINT_INSERT(d: Dialect, prefix: str, guard: FromClause | None) -> UpdateBase:
    """Append a checkpoint unless its sequence is taken, riding along the move that commits
    it (``checkpoint_insert``: a step's commit, a run's insert, a migration)."""
    statement = d.insert_unless_present(CHECKPOINTS, "run_id", "seq")
    return insert_row(statement, CHECKPOINTS, CHECKPOINT_COLUMNS, prefix, guard)
