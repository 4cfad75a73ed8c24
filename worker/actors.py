"""Responders: stored with roles and a credential kept only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models.contracts import ActorView
from models.db import transaction, utcnow
from models.errors import ActorError, ActorExistsError, ActorNotFoundError
from models.tables import Actor

ACTOR_ID = re.compile(r"^[A-Za-z0-9_.@:\-]{1,200}$")
ROLE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
CREDENTIAL_PREFIX = "ilc_"
# Compared against when the actor does not exist, so that timing does not tell who exists.
_ABSENT_HASH = "sha256$" + "0" * 64


def hash_credential(credential: str) -> str:
    # Credentials are 256-bit random tokens, so a fast hash is enough; no salt is needed.
    # surrogatepass: whatever string a caller submits hashes instead of raising.
    digest = hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()
    return "sha256$" + digest


def _roles(actor_id: str, roles: list[str] | tuple[str, ...]) -> list[str]:
    # A bare string is iterable too: "approver" must not become the roles a, e, o, p, r, v.
    if isinstance(roles, str) or not all(isinstance(r, str) for r in roles):
        raise ActorError(actor_id=actor_id, detail="roles must be a list of strings")
    cleaned = sorted({r.strip() for r in roles if r.strip()})
    if not cleaned:
        raise ActorError(actor_id=actor_id, detail="at least one role is required")
    bad = [r for r in cleaned if not ROLE.fullmatch(r)]
    if bad:
        raise ActorError(actor_id=actor_id, detail=f"role {bad[0]!r} is not a valid name")
    return cleaned


def add_actor(actor_id: str, roles: list[str] | tuple[str, ...]) -> str:
    """Create a responder and return its credential: the only time it is ever shown."""
    if not isinstance(actor_id, str) or not ACTOR_ID.fullmatch(actor_id):
        raise ActorError(actor_id=actor_id, detail="id may only hold letters, digits and ._@:-")
    role_list = _roles(actor_id, roles)
    credential = CREDENTIAL_PREFIX + secrets.token_urlsafe(32)
    try:
        with transaction() as session:
            session.add(
                Actor(
                    id=actor_id,
                    roles=role_list,
                    credential_hash=hash_credential(credential),
                    created_at=utcnow(),
                )
            )
    except IntegrityError:
        raise ActorExistsError(actor_id=actor_id) from None
    return credential


def _load(session: Session, actor_id: str) -> Actor:
    actor = session.get(Actor, actor_id)
    if actor is None:
        raise ActorNotFoundError(actor_id=actor_id)
    return actor


def revoke_actor(actor_id: str) -> None:
    with transaction() as session:
        actor = _load(session, actor_id)
        if actor.revoked_at is None:
            actor.revoked_at = utcnow()


def set_actor_roles(actor_id: str, roles: list[str] | tuple[str, ...]) -> None:
    role_list = _roles(actor_id, roles)
    with transaction() as session:
        _load(session, actor_id).roles = role_list


def list_actors() -> list[ActorView]:
    with transaction(readonly=True) as session:
        rows = session.execute(select(Actor).order_by(Actor.id)).scalars()
        return [ActorView.model_validate(row, from_attributes=True) for row in rows]


def authenticate(session: Session, actor_id: str, credential: object) -> Actor | None:
    """The active actor whose stored hash matches ``credential`` (constant-time), else None."""
    actor = session.get(Actor, actor_id)
    stored = actor.credential_hash if actor is not None else _ABSENT_HASH
    given = hash_credential(credential) if isinstance(credential, str) else ""
    matches = hmac.compare_digest(stored.encode(), given.encode())
    if actor is None or not matches or actor.revoked_at is not None:
        return None
    return actor
