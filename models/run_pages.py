"""Reads for the operators' console and ``GET /v1/runs``: runs a reader may see, newest first,
a page at a time, and their counts by state.

What a reader sees is given as flow versions (``FlowScope``), computed from the registered
flows' roles by the caller: this module knows no roles. Pages are keyed by ``(created_at,
id)``, both descending, so a cursor stays valid while runs are added or move on.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import ColumnElement, and_, false, func, or_, select
from sqlalchemy.orm import Session

from models.enums import RunState
from models.errors import InvalidInputError
from models.tables import Run


@dataclass(frozen=True)
class FlowScope:
    """The versions of one flow a reader sees: ``versions``, and when ``others`` is set every
    version not in ``known`` (versions no longer registered here, read as the newest is)."""

    name: str
    versions: frozenset[int]
    others: bool = False
    known: frozenset[int] = frozenset()


@dataclass(frozen=True)
class RunFilter:
    """What ``runs list`` filters by: every given field must match."""

    state: RunState | None = None
    flow: str | None = None
    started_by: str | None = None
    created_before: datetime | None = None


def encode_cursor(created_at: datetime, run_id: str) -> str:
    raw = f"{created_at.astimezone(UTC).isoformat()}|{run_id}".encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The position a cursor names; InvalidInputError for anything this listing did not make."""
    try:
        padded = cursor + "=" * (-len(cursor) % 4)
        at, _, run_id = base64.urlsafe_b64decode(padded).decode().partition("|")
        created_at = datetime.fromisoformat(at)
    except (binascii.Error, UnicodeDecodeError, ValueError):
        raise InvalidInputError(detail="cursor is not one this run listing returned") from None
    if created_at.tzinfo is None or not run_id:
        raise InvalidInputError(detail="cursor is not one this run listing returned")
    return created_at, run_id


def _scoped(scope: Sequence[FlowScope]) -> ColumnElement[bool]:
    # Flows read in every version are one IN list, which the (flow_name, state) index answers
    # alone for counts; only flows read in some versions need their versions compared.
    whole = sorted(f.name for f in scope if f.others and f.versions >= f.known)
    clauses: list[ColumnElement[bool]] = [Run.flow_name.in_(whole)] if whole else []
    for flow in scope:
        if flow.name in whole:
            continue
        versions: list[ColumnElement[bool]] = []
        if flow.versions:
            versions.append(Run.flow_version.in_(sorted(flow.versions)))
        if flow.others:
            versions.append(Run.flow_version.not_in(sorted(flow.known)))
        if versions:
            clauses.append(and_(Run.flow_name == flow.name, or_(*versions)))
    # No flow the reader sees: nothing matches (an empty OR would match everything nowhere).
    return or_(*clauses) if clauses else false()


def _filtered(scope: Sequence[FlowScope], wanted: RunFilter) -> list[ColumnElement[bool]]:
    where = [_scoped(scope)]
    if wanted.state is not None:
        where.append(Run.state == wanted.state.value)
    if wanted.flow is not None:
        where.append(Run.flow_name == wanted.flow)
    if wanted.started_by is not None:
        where.append(Run.started_by == wanted.started_by)
    if wanted.created_before is not None:
        where.append(Run.created_at < wanted.created_before)
    return where


# What a listing shows of a run: not its input, state or output, which may be large.
LISTED = (
    Run.id,
    Run.flow_name,
    Run.flow_version,
    Run.state,
    Run.next_step,
    Run.started_by,
    Run.forked_from,
    Run.error,
    Run.created_at,
    Run.updated_at,
    Run.finished_at,
)


def page_of_runs(
    session: Session,
    scope: Sequence[FlowScope],
    wanted: RunFilter,
    *,
    after: tuple[datetime, str] | None,
    limit: int,
) -> tuple[list[Any], bool]:
    """Up to ``limit`` runs after the position ``after``, newest first (the ``LISTED``
    columns), and whether more follow."""
    query = select(*LISTED).where(*_filtered(scope, wanted))
    if after is not None:
        at, last_id = after
        query = query.where(or_(Run.created_at < at, and_(Run.created_at == at, Run.id < last_id)))
    query = query.order_by(Run.created_at.desc(), Run.id.desc()).limit(limit + 1)
    rows = list(session.execute(query).all())
    return rows[:limit], len(rows) > limit


def counts_by_state(
    session: Session, scope: Sequence[FlowScope], wanted: RunFilter
) -> dict[str, int]:
    """How many runs the filter (but its state) matches, per state."""
    everywhere = RunFilter(None, wanted.flow, wanted.started_by, wanted.created_before)
    query = select(Run.state, func.count()).where(*_filtered(scope, everywhere)).group_by(Run.state)
    return {str(state): int(count) for state, count in session.execute(query).all()}


def flow_names(session: Session, run_ids: Sequence[str]) -> dict[str, str]:
    """The flow of each of ``run_ids`` that exists, by run id."""
    query = select(Run.id, Run.flow_name).where(Run.id.in_(list(run_ids)))
    return {str(run_id): str(name) for run_id, name in session.execute(query).all()}
