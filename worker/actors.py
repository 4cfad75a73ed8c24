"""Responders: stored with roles and a credential kept only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import actors as store
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
            store.insert_actor(session, actor_id, role_list, hash_credential(credential))
    except IntegrityError:
        raise ActorExistsError(actor_id=actor_id) from None
    return credential


def revoke_actor(actor_id: str) -> None:
    with transaction() as session:
        if not store.revoke(session, actor_id, utcnow()) and not store.exists(session, actor_id):
            raise ActorNotFoundError(actor_id=actor_id)


def set_actor_roles(actor_id: str, roles: list[str] | tuple[str, ...]) -> None:
    role_list = _roles(actor_id, roles)
    with transaction() as session:
        if not store.set_roles(session, actor_id, role_list):
            raise ActorNotFoundError(actor_id=actor_id)


def list_actors() -> list[ActorView]:
    with transaction(readonly=True) as session:
        return [
            ActorView.model_validate(row, from_attributes=True) for row in store.list_all(session)
        ]


def authenticate(session: Session, actor_id: str, credential: object) -> Actor | None:
    """The active actor whose stored hash matches ``credential`` (constant-time), else None.

    The row stays as read until the caller's transaction ends: a revoke committing meanwhile
    is ordered after the decision made with it, not in the middle of it.
    """
    actor = store.get_actor(session, actor_id, for_decision=True)
    stored = actor.credential_hash if actor is not None else _ABSENT_HASH
    given = hash_credential(credential) if isinstance(credential, str) else ""
    matches = hmac.compare_digest(stored.encode(), given.encode())
    if actor is None or not matches or actor.revoked_at is not None:
        return None
    return actor
