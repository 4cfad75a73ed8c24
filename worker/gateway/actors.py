"""Responders: stored with roles and a credential kept only as a hash."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Iterable
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import actors as actor_store
from models.contracts import ActorView
from models.db import transaction, utcnow
from models.enums import ActorKind
from models.errors import ActorError, ActorExistsError, ActorNotFoundError
from models.identity import CREDENTIAL_PREFIX, actor_id_problem, normal_actor_id
from models.redaction import redact_text, redacted
from models.storable import storable_text
from models.tables import Actor
from worker.arguments import shown

ROLE = re.compile(r"^[A-Za-z0-9_.:\-]{1,100}$")
# Compared against when the actor does not exist, so that timing does not tell who exists.
_ABSENT_HASH = "sha256$" + "0" * 64


def hash_credential(credential: str) -> str:
    # Credentials are 256-bit random tokens, so a fast hash is enough; no salt is needed.
    # surrogatepass: whatever string a caller submits hashes instead of raising.
    digest = hashlib.sha256(credential.encode("utf-8", "surrogatepass")).hexdigest()
    return "sha256$" + digest


class Credential:
    """A submitted credential, held so that no repr, log line or traceback's locals show it.

    Error trackers record the locals of every frame of a traceback: the gateway keeps only
    this wrapper in its frames, never the text.
    """

    __slots__ = ("_text",)
    _text: object

    def __init__(self, value: Any) -> None:
        self._text = value._text if isinstance(value, Credential) else value

    def __repr__(self) -> str:
        return "Credential(<hidden>)"

    __str__ = __repr__

    def hashed(self) -> str:
        """The stored form of this credential ("" when it is not text: it matches nothing)."""
        if not isinstance(self._text, str):
            return ""
        return "sha256$" + hashlib.sha256(self._text.encode("utf-8", "surrogatepass")).hexdigest()

    def redact(self, text: str) -> str:
        """``text`` with this credential, and anything shaped like one, replaced."""
        return redact_text(text, self._text if isinstance(self._text, str) else None)

    def redacted(self, value: Any) -> Any:
        """The JSON value ``value`` redacted as ``redact`` redacts text (``models.redaction``)."""
        return redacted(value, self._text if isinstance(self._text, str) else None)


def redact_shaped(text: str) -> str:
    """``text`` with anything shaped like an issued credential replaced.

    The ids an attempt is filed under (run, interrupt, actor, key) get only this: redacting
    the submitted text there too would let a caller file a refusal out of sight, by sending
    the interrupt's id as the credential. Every issued credential has this shape.
    """
    return redact_text(text)


def checked_actor_id(actor_id: object) -> str:
    """``actor_id`` in its normal form, or ActorError saying why it cannot be one."""
    problem = actor_id_problem(actor_id)
    if problem is not None or not isinstance(actor_id, str):
        raise ActorError(actor_id=str(actor_id)[:200], detail=problem or "not text")
    return normal_actor_id(actor_id)


def _stored_id(actor_id: object) -> str:
    """``actor_id`` in its normal form, to find an actor by; ActorError if it is not text.

    Unlike ``checked_actor_id`` it takes ids that today's rules would refuse: an actor added
    before a rule existed can still be rotated, revoked or given roles.
    """
    if not isinstance(actor_id, str):
        raise ActorError(actor_id=shown(actor_id), detail="an actor id must be text")
    if not storable_text(actor_id):
        # No actor has such an id (add_actor refuses it), and PostgreSQL fails on the lookup.
        raise ActorNotFoundError(actor_id=shown(actor_id))
    return normal_actor_id(actor_id)


def _roles(actor_id: str, roles: list[str] | tuple[str, ...]) -> list[str]:
    # A bare string is iterable too: "approver" must not become the roles a, e, o, p, r, v.
    # None or a number is the same mistake, not a TypeError from iterating it.
    if isinstance(roles, str | bytes) or not isinstance(roles, Iterable):
        raise ActorError(actor_id=actor_id, detail="roles must be a list of strings")
    # Read once: a generator would be empty the second time.
    roles = list(roles)
    if not all(isinstance(r, str) for r in roles):
        raise ActorError(actor_id=actor_id, detail="roles must be a list of strings")
    named = [r.strip() for r in roles]
    if not any(named):
        raise ActorError(actor_id=actor_id, detail="at least one role is required")
    if not all(named):
        # Dropping it would grant fewer roles than asked for, without a word.
        blank = roles[named.index("")]
        raise ActorError(actor_id=actor_id, detail=f"role {blank!r} is blank")
    cleaned = sorted(set(named))
    bad = [r for r in cleaned if not ROLE.fullmatch(r)]
    if bad:
        raise ActorError(actor_id=actor_id, detail=f"role {bad[0]!r} is not a valid name")
    return cleaned


def _new_credential() -> str:
    return CREDENTIAL_PREFIX + secrets.token_urlsafe(32)


def add_actor(
    actor_id: str, roles: list[str] | tuple[str, ...], *, kind: str = ActorKind.HUMAN
) -> str:
    """Create a responder and return its credential: the only time it is ever shown.

    The id is stored in its normal form (trimmed, NFKC, case-folded); an id that is another's
    after normalisation is refused as existing. ``kind`` (``human`` or ``service``) is what
    the actor answers and acts as: a request claiming the other kind is refused.
    """
    actor_id = checked_actor_id(actor_id)
    role_list = _roles(actor_id, roles)
    checked_kind = _kind(actor_id, kind)
    credential = _new_credential()
    try:
        with transaction() as session:
            actor_store.insert_actor(
                session, actor_id, role_list, hash_credential(credential), checked_kind
            )
    except IntegrityError:
        raise ActorExistsError(actor_id=actor_id) from None
    return credential


def rotate_actor(actor_id: str) -> str:
    """A new credential for the same actor (also one that was revoked); the old one stops
    working when this commits. Returns the credential: the only time it is shown."""
    actor_id = _stored_id(actor_id)
    credential = _new_credential()
    with transaction() as session:
        if not actor_store.replace_credential(session, actor_id, hash_credential(credential)):
            raise ActorNotFoundError(actor_id=actor_id)
    return credential


def revoke_actor(actor_id: str) -> None:
    actor_id = _stored_id(actor_id)
    with transaction() as session:
        if not actor_store.revoke(session, actor_id, utcnow()) and not actor_store.exists(
            session, actor_id
        ):
            raise ActorNotFoundError(actor_id=actor_id)


def set_actor_kind(actor_id: str, kind: str) -> None:
    """Correct what an actor is (``human`` or ``service``); its credential stays valid."""
    actor_id = _stored_id(actor_id)
    checked_kind = _kind(actor_id, kind)
    with transaction() as session:
        if not actor_store.set_kind(session, actor_id, checked_kind):
            raise ActorNotFoundError(actor_id=actor_id)


def _kind(actor_id: str, kind: object) -> str:
    if kind not in tuple(ActorKind):
        kinds = ", ".join(ActorKind)
        raise ActorError(actor_id=actor_id, detail=f"the kind must be one of {kinds}")
    return str(kind)


def set_actor_roles(actor_id: str, roles: list[str] | tuple[str, ...]) -> None:
    actor_id = _stored_id(actor_id)
    role_list = _roles(actor_id, roles)
    with transaction() as session:
        if not actor_store.set_roles(session, actor_id, role_list):
            raise ActorNotFoundError(actor_id=actor_id)


def list_actors() -> list[ActorView]:
    with transaction(readonly=True) as session:
        return [
            ActorView.model_validate(row, from_attributes=True)
            for row in actor_store.list_all(session)
        ]


def authenticate(
    session: Session, actor_id: str, credential: object, *, for_decision: bool = True
) -> Actor | None:
    """The active actor whose stored hash matches ``credential`` (constant-time), else None.

    ``actor_id`` is compared in its normal form. ``for_decision``: the row is locked for share
    until the caller's transaction ends, so that a revoke or rotation committing meanwhile is
    ordered after the decision made with it, not in the middle of it. A read decides nothing
    and takes no lock: on PostgreSQL the lock is a write, taken only when the actor exists,
    and its cost would tell who exists.
    """
    row = actor_store.get_actor(session, normal_actor_id(actor_id), for_decision=for_decision)
    return verified(row, credential)


def verified(actor: Actor | None, credential: object) -> Actor | None:
    """``actor`` if it exists, is active and ``credential`` matches its stored hash, else None.

    The comparison is constant-time, and made against a stand-in hash when there is no actor,
    so that an unknown id costs what a wrong credential costs.
    """
    stored = actor.credential_hash if actor is not None else _ABSENT_HASH
    given = Credential(credential).hashed()
    matches = hmac.compare_digest(stored.encode(), given.encode())
    if actor is None or not matches or actor.revoked_at is not None:
        return None
    return actor
