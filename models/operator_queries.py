"""Read queries of the operators' command: ids from the prefixes people type."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session

from models.enums import RunState
from models.tables import Interrupt, Run

# At most this many candidates are named when a prefix is ambiguous.
MAX_CANDIDATES = 10
_HEX = "0123456789abcdef"


def ids_with_prefix(session: Session, table: type[Run] | type[Interrupt], prefix: str) -> list[str]:
    """Ids of ``table`` starting with ``prefix`` (at most MAX_CANDIDATES + 1), in order.

    Ids are lowercase hex: a range on the primary key lets its index answer, and the prefix
    test keeps the answer exact.
    """
    column = table.id
    query = select(column).where(column >= prefix, column.startswith(prefix, autoescape=True))
    last = prefix[-1:]
    if last and last in _HEX[:-1]:
        query = query.where(column < prefix[:-1] + _HEX[_HEX.index(last) + 1])
    query = query.order_by(column).limit(MAX_CANDIDATES + 1)
    return [str(found) for found in session.execute(query).scalars()]


def select_runs(
    session: Session,
    *,
    state: RunState | None,
    flow: str | None,
    started_by: str | None,
    created_before: datetime | None,
    limit: int | None,
) -> list[Run]:
    """Runs matching every given filter, newest first."""
    query = select(Run).order_by(Run.created_at.desc(), Run.id)
    if state is not None:
        query = query.where(Run.state == state.value)
    if flow is not None:
        query = query.where(Run.flow_name == flow)
    if started_by is not None:
        query = query.where(Run.started_by == started_by)
    if created_before is not None:
        query = query.where(Run.created_at < created_before)
    if limit is not None:
        query = query.limit(limit)
    return list(session.execute(query).scalars())
