"""The actors store: responders, their roles and the hash of their credential."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import Table, bindparam, insert, select, update
from sqlalchemy.orm import Session

from models.db import dialect, utcnow
from models.dialects import Dialect
from models.statements import named
from models.tables import Actor, from_row

ACTORS: Table = Actor.__table__  # type: ignore[assignment]


def insert_actor(
    session: Session, actor_id: str, roles: list[str], credential_hash: str, kind: str
) -> None:
    """A new actor; an id that exists raises IntegrityError."""
    session.execute(
        insert(ACTORS).values(
            id=actor_id,
            roles=roles,
            credential_hash=credential_hash,
            created_at=utcnow(),
            kind=kind,
        )
    )


def get_actor(session: Session, actor_id: str, *, for_decision: bool = False) -> Actor | None:
    """The actor row; ``for_decision`` keeps it from changing (a revoke) until commit."""
    params = {"actor_id": actor_id}
    found = dialect(session).run(session, ACTOR_GET, (for_decision,), params).first()
    return None if found is None else from_row(Actor, found)


@named("actor.get", shapes=((False,), (True,)))
def ACTOR_GET(d: Dialect, for_decision: bool) -> Any:
    """Read an actor; ``for_decision``, locked for share until commit, so that a revoke
    cannot slip in (``get_actor``: the gateway, the web sign-in, the CLI)."""
    query = select(*ACTORS.c).where(ACTORS.c.id == bindparam("actor_id"))
    return d.lock_shared(query) if for_decision else query


def revoke(session: Session, actor_id: str, at: datetime) -> bool:
    """Revoke the actor if it is active; False if it does not exist or was revoked before."""
    result = session.execute(
        update(ACTORS)
        .where(ACTORS.c.id == actor_id, ACTORS.c.revoked_at.is_(None))
        .values(revoked_at=at)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def replace_credential(session: Session, actor_id: str, credential_hash: str) -> bool:
    """A new credential hash for the actor, active again; False if it does not exist."""
    result = session.execute(
        update(ACTORS)
        .where(ACTORS.c.id == actor_id)
        .values(credential_hash=credential_hash, revoked_at=None)
    )
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def set_kind(session: Session, actor_id: str, kind: str) -> bool:
    result = session.execute(update(ACTORS).where(ACTORS.c.id == actor_id).values(kind=kind))
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def set_roles(session: Session, actor_id: str, roles: list[str]) -> bool:
    result = session.execute(update(ACTORS).where(ACTORS.c.id == actor_id).values(roles=roles))
    return bool(result.rowcount == 1)  # type: ignore[attr-defined]


def exists(session: Session, actor_id: str) -> bool:
    return session.execute(select(Actor.id).where(Actor.id == actor_id)).first() is not None


def list_all(session: Session) -> list[Actor]:
    return list(session.execute(select(Actor).order_by(Actor.id)).scalars())
