"""The answer-links store: links kept as the hash of their token, with what they may answer."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from models.db import dialect
from models.dialects import Dialect
from models.statements import named
from models.tables import AnswerLink, from_row

LINKS: Table = AnswerLink.__table__  # type: ignore[assignment]


def insert_links(session: Session, rows: list[dict[str, Any]]) -> None:
    """New links (each row all of the table's columns but the revocation)."""
    if rows:
        session.execute(insert(LINKS), rows)


def link_for_decision(session: Session, link_id: str) -> AnswerLink | None:
    """The link, locked for share until commit: a revocation is ordered after the decision
    made with it, not in its middle (as for an actor's row)."""
    found = dialect(session).run(session, LINK_FOR_DECISION, (), {"link_id": link_id}).first()
    return None if found is None else from_row(AnswerLink, found)


@named("link.for_decision")
def LINK_FOR_DECISION(d: Dialect) -> Any:
    """Read an answer link, locked for share until commit (``link_for_decision``: a link's
    answer is decided before its revocation, never in its middle)."""
    return d.lock_shared(select(*LINKS.c).where(LINKS.c.id == bindparam("link_id")))


def get_link(session: Session, link_id: str) -> AnswerLink | None:
    return session.get(AnswerLink, link_id)


def revoke(
    session: Session,
    at: datetime,
    by: str,
    *,
    link_id: str | None = None,
    actor_id: str | None = None,
    interrupt_id: str | None = None,
) -> list[str]:
    """Revoke the active links matching every filter given; returns their ids."""
    query = update(LINKS).where(LINKS.c.revoked_at.is_(None))
    if link_id is not None:
        query = query.where(LINKS.c.id == link_id)
    if actor_id is not None:
        query = query.where(LINKS.c.actor_id == actor_id)
    if interrupt_id is not None:
        query = query.where(LINKS.c.interrupt_id == interrupt_id)
    result = session.execute(query.values(revoked_at=at, revoked_by=by).returning(LINKS.c.id))
    return [row[0] for row in result]


def list_links(
    session: Session,
    *,
    interrupt_id: str | None = None,
    actor_id: str | None = None,
    active_at: datetime | None = None,
    channel: str | None = None,
    limit: int = 1000,
) -> list[AnswerLink]:
    """Links, newest first; ``active_at``: only those neither revoked nor expired then."""
    query = select(AnswerLink).order_by(AnswerLink.created_at.desc(), AnswerLink.id).limit(limit)
    if interrupt_id is not None:
        query = query.where(AnswerLink.interrupt_id == interrupt_id)
    if actor_id is not None:
        query = query.where(AnswerLink.actor_id == actor_id)
    if channel is not None:
        query = query.where(AnswerLink.channel == channel)
    if active_at is not None:
        query = query.where(AnswerLink.revoked_at.is_(None), AnswerLink.expires_at > active_at)
    return list(session.execute(query).scalars())
