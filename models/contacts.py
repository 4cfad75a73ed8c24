"""Where actors are reached (``actor_contacts``): e-mail addresses and Slack users."""

from __future__ import annotations

from collections.abc import Iterable

from sqlalchemy import delete, insert, select
from sqlalchemy.orm import Session

from models.db import utcnow
from models.tables import Actor, ActorContact


def add(session: Session, actor_id: str, channel: str, address: str) -> None:
    """A new contact; an address of the channel that exists raises IntegrityError."""
    session.execute(
        insert(ActorContact).values(
            actor_id=actor_id, channel=channel, address=address, created_at=utcnow()
        )
    )


def remove(session: Session, channel: str, address: str) -> bool:
    result = session.execute(
        delete(ActorContact).where(ActorContact.channel == channel, ActorContact.address == address)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def list_all(session: Session, actor_id: str | None = None) -> list[ActorContact]:
    query = select(ActorContact).order_by(
        ActorContact.actor_id, ActorContact.channel, ActorContact.address
    )
    if actor_id is not None:
        query = query.where(ActorContact.actor_id == actor_id)
    return list(session.execute(query).scalars())


def actor_of(session: Session, channel: str, address: str) -> str | None:
    """The actor an address of the channel is kept for, if any."""
    found = session.execute(
        select(ActorContact.actor_id).where(
            ActorContact.channel == channel, ActorContact.address == address
        )
    ).first()
    return None if found is None else str(found[0])


def reachable(session: Session, channel: str, roles: Iterable[str]) -> list[tuple[Actor, str]]:
    """Active actors holding one of ``roles``, with each address they have on ``channel``.

    Roles are a JSON list, queried alike on neither database: matched here.
    """
    wanted = set(roles)
    rows = session.execute(
        select(Actor, ActorContact.address)
        .join(ActorContact, ActorContact.actor_id == Actor.id)
        .where(Actor.revoked_at.is_(None), ActorContact.channel == channel)
        .order_by(Actor.id, ActorContact.address)
    ).all()
    return [(actor, address) for actor, address in rows if wanted & set(actor.roles or [])]
