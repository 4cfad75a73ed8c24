"""Who is asking: actors authenticated by the same check the gateway uses, and client keys."""

from __future__ import annotations

from starlette.requests import Request

from models.contracts import ActorView
from models.db import transaction
from models.identity import actor_id_problem
from worker.gateway.actors import authenticate

ACTOR_HEADER = "X-Interlude-Actor"


def authenticated(actor_id: str | None, credential: str | None) -> ActorView | None:
    """The active actor ``actor_id`` if ``credential`` is its credential, else None."""
    # An id no actor can have names nobody: answered without asking the database (which may
    # refuse the text itself: PostgreSQL takes no NUL).
    if not actor_id or not credential or actor_id_problem(actor_id) is not None:
        return None
    with transaction(readonly=True) as session:
        # A read: no lock (it would make a wrong credential of an existing actor slower).
        actor = authenticate(session, actor_id, credential, for_decision=False)
        return ActorView.model_validate(actor, from_attributes=True) if actor else None


def bearer(request: Request) -> str | None:
    """The credential of an ``Authorization: Bearer`` header, if there is one."""
    header = request.headers.get("authorization", "")
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "bearer" or not value.strip():
        return None
    return value.strip()


def client_of(request: Request) -> str:
    return request.client.host if request.client is not None else "unknown"
