"""Answer links: a signed, single-use, expiring token that answers one interrupt as one person.

A link is issued for an interrupt and one responder, with the decisions it may make. Its
token is ``ila_<link id>.<nonce>.<mac>``: the MAC (HMAC-SHA256 under ``INTERLUDE_LINK_SECRET``)
means a token nobody signed is refused before the database is asked, and that write access
to the database alone mints no link; the database keeps only the token's sha256. Opening a
link (``link_page``) reads and changes nothing. Confirming one (``answer_with_link``) builds a
``resume.v1`` contract bound to what the link was issued for and submits it through the
gateway as the responder (``gateway.submit_proven``), so every rule holds: the gateway checks
the link as check 2 (``LinkProof``) and records the attempt ``via link:<id>``. The contract's
idempotency key is the link's own, so the first decision claims it: a link used again is a
duplicate of its first use. Revoking or rotating the responder ends its links.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
import secrets
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from models import actors as actor_store
from models import attempts as attempt_store
from models import interrupts as interrupt_store
from models import links as store
from models.canonical import json_hash as _json_hash
from models.contracts import InterruptView, ResumeContract, ResumeResult, contract_payload
from models.db import transaction, utcnow
from models.enums import Decision, InterruptStatus, ResumeOutcome
from models.errors import InterruptNotFoundError, LinkError
from models.identity import normal_actor_id
from models.settings import get_settings
from models.tables import Actor, AnswerLink, ResumeAttempt
from worker.gateway import attempt_records as attempts
from worker.gateway.actors import Credential
from worker.gateway.checks import Refusal
from worker.gateway.submit import submit_proven
from worker.interrupts import view

TOKEN_PREFIX = "ila_"
# ila_<32 hex>.<43 of token_urlsafe(32)>.<43: the MAC, unpadded base64url>
TOKEN_SHAPE = re.compile(r"ila_[0-9a-f]{32}\.[A-Za-z0-9_\-]{43}\.[A-Za-z0-9_\-]{43}")
# Any text that starts like a token: redacted from what is logged and stored.
TOKEN_LIKE = re.compile(r"ila_[0-9a-f]{6,}[A-Za-z0-9_.\-]*")
DECISIONS = (Decision.APPROVED.value, Decision.REJECTED.value)
# Where a link is opened, on the web server (worker.web.links).
LINK_PATH = "/inbox/a/"


def key_of(link_id: str) -> str:
    """The idempotency key of every contract a link submits: its first decision claims it."""
    return f"link:{link_id}"


def hashed(token: str) -> str:
    return "sha256$" + hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def actor_binding(credential_hash: str) -> str:
    """What a link remembers of its actor's credential: rotating the actor changes it."""
    return "sha256$" + hashlib.sha256(f"answer-link:{credential_hash}".encode()).hexdigest()


def redact_tokens(text: str) -> str:
    return TOKEN_LIKE.sub("ila_[redacted]", text)


def _secret() -> bytes:
    secret = get_settings().link_secret
    if not secret:
        raise LinkError(
            detail="INTERLUDE_LINK_SECRET is not set: answer links are signed with it "
            "(python -c 'import secrets; print(secrets.token_urlsafe(32))')"
        )
    return secret.encode()


def _mac(body: str, secret: bytes) -> str:
    digest = hmac.new(secret, body.encode(), hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _new_token(link_id: str, secret: bytes) -> str:
    body = f"{TOKEN_PREFIX}{link_id}.{secrets.token_urlsafe(32)}"
    return f"{body}.{_mac(body, secret)}"


def signed_link_id(token: object) -> str | None:
    """The link id of a token this server signed; None for anything else (constant-time)."""
    if not isinstance(token, str) or not TOKEN_SHAPE.fullmatch(token):
        return None
    body, _, mac = token.rpartition(".")
    try:
        secret = _secret()
    except LinkError:
        return None
    if not hmac.compare_digest(_mac(body, secret).encode(), mac.encode()):
        return None
    return body[len(TOKEN_PREFIX) :].partition(".")[0]


@dataclass(frozen=True)
class IssuedLink:
    """A link just issued: the only time its token exists outside the message carrying it."""

    link_id: str
    interrupt_id: str
    actor_id: str
    decisions: tuple[str, ...]
    expires_at: datetime
    token: str = field(repr=False)

    def url(self, base_url: str | None = None) -> str:
        base = (base_url or get_settings().inbox_url()).rstrip("/")
        return f"{base}{LINK_PATH}{self.token}"


def issue_links(
    interrupt_id: str,
    actor_ids: Iterable[str],
    *,
    channel: str = "cli",
    decisions: Iterable[str] = DECISIONS,
    expires_in: float | None = None,
) -> list[IssuedLink]:
    """One link per actor and decision set for the pending interrupt ``interrupt_id``.

    Each lives ``expires_in`` seconds (``INTERLUDE_LINK_SECONDS`` by default), never past the
    interrupt's deadline. Refused (LinkError) for an interrupt that is not pending, an actor
    that does not exist or is revoked, or a decision that is not one.
    """
    allowed = tuple(dict.fromkeys(decisions))
    if not allowed or any(d not in DECISIONS for d in allowed):
        raise LinkError(detail=f"decisions must be some of {', '.join(DECISIONS)}")
    secret = _secret()
    seconds = get_settings().link_seconds if expires_in is None else expires_in
    if not 0 < seconds <= get_settings().link_seconds:
        raise LinkError(
            detail=f"a link lives above 0 and at most {get_settings().link_seconds} seconds "
            "(INTERLUDE_LINK_SECONDS)"
        )
    now = utcnow()
    issued: list[IssuedLink] = []
    rows: list[dict[str, Any]] = []
    with transaction() as session:
        interrupt = interrupt_store.get(session, interrupt_id)
        if interrupt is None:
            raise InterruptNotFoundError(interrupt_id=interrupt_id)
        if interrupt.status != InterruptStatus.PENDING.value:
            raise LinkError(detail=f"interrupt {interrupt_id} is {interrupt.status}, not pending")
        expires_at = min(now + timedelta(seconds=seconds), interrupt.deadline)
        for given in dict.fromkeys(normal_actor_id(a) for a in actor_ids):
            actor = actor_store.get_actor(session, given)
            if actor is None or actor.revoked_at is not None:
                raise LinkError(detail=f"actor {given} does not exist or is revoked")
            link_id = uuid.uuid4().hex
            token = _new_token(link_id, secret)
            rows.append(
                {
                    "id": link_id,
                    "token_hash": hashed(token),
                    "interrupt_id": interrupt.id,
                    "run_id": interrupt.run_id,
                    "checkpoint_id": interrupt.checkpoint_id,
                    "scope_hash": _json_hash(interrupt.scope),
                    "evidence_hash": interrupt.evidence_hash,
                    "policy_version": interrupt.policy_version,
                    "actor_id": actor.id,
                    "actor_binding": actor_binding(actor.credential_hash),
                    "decisions": list(allowed),
                    "channel": channel,
                    "created_at": now,
                    "expires_at": expires_at,
                }
            )
            issued.append(IssuedLink(link_id, interrupt.id, actor.id, allowed, expires_at, token))
        store.insert_links(session, rows)
    return issued


class LinkProof:
    """Check 2 for a submission made with an answer link (see
    ``worker.gateway.attempt_records.Proof``)."""

    single_use = True

    def __init__(self, link_id: str, token: str) -> None:
        self.link_id = link_id
        self._token_hash = hashed(token)
        self.via = f"link:{link_id}"

    def __repr__(self) -> str:
        return f"LinkProof({self.link_id})"

    def verify(
        self, session: Session, actor: Actor | None, contract: ResumeContract
    ) -> Actor | None:
        link = store.link_for_decision(session, self.link_id)
        if link is None or not hmac.compare_digest(link.token_hash, self._token_hash):
            return None
        if link.revoked_at is not None:
            raise Refusal(
                ResumeOutcome.UNAUTHENTICATED,
                f"link {link.id} was revoked at {link.revoked_at.isoformat()} by {link.revoked_by}",
            )
        if actor is None or actor.id != link.actor_id:
            raise Refusal(
                ResumeOutcome.UNAUTHENTICATED,
                f"link {link.id} answers as {link.actor_id} only, not as {contract.actor.id}",
            )
        if actor.revoked_at is not None or actor_binding(actor.credential_hash) != (
            link.actor_binding
        ):
            raise Refusal(
                ResumeOutcome.UNAUTHENTICATED,
                f"actor {actor.id} was revoked or given a new credential since link {link.id} "
                "was issued; the link no longer answers",
            )
        if link.expires_at <= utcnow():
            raise Refusal(
                ResumeOutcome.EXPIRED, f"link {link.id} expired at {link.expires_at.isoformat()}"
            )
        beyond = _beyond(link, contract)
        if beyond:
            raise Refusal(
                ResumeOutcome.DENIED,
                f"link {link.id} does not cover this answer: {'; '.join(beyond)}",
            )
        return actor


def _beyond(link: AnswerLink, contract: ResumeContract) -> list[str]:
    """What the contract asks that the link was not issued for."""
    checks = (
        ("interrupt", contract.interrupt_id, link.interrupt_id),
        ("run", contract.run_id, link.run_id),
        ("checkpoint", contract.checkpoint_id, link.checkpoint_id),
        ("evidence hash", contract.evidence_hash, link.evidence_hash),
        ("scope", _json_hash(contract.scope), link.scope_hash),
        ("idempotency key", contract.idempotency_key, key_of(link.id)),
    )
    problems = [f"{what} is not the link's" for what, given, own in checks if given != own]
    if contract.policy_version is not None and contract.policy_version != link.policy_version:
        problems.append("policy version is not the link's")
    if contract.decision.value not in (link.decisions or []):
        problems.append(
            f"decision {contract.decision.value} is not one of {', '.join(link.decisions)}"
        )
    return problems


@dataclass(frozen=True)
class LinkPage:
    """What opening a link shows: the interrupt, what the link may decide, whether it still
    can (``problem`` says why not), and the attempt that used it, if any."""

    link_id: str
    actor_id: str
    decisions: tuple[str, ...]
    expires_at: datetime
    interrupt: InterruptView
    used_by: ResumeAttempt | None
    problem: str | None


def link_page(token: str) -> LinkPage | None:
    """What the link shows, read in one read-only transaction; None for a token that is not
    a link of this server's (refusals are recorded only when someone answers)."""
    link_id = signed_link_id(token)
    if link_id is None:
        return None
    with transaction(readonly=True) as session:
        link = store.get_link(session, link_id)
        if link is None or not hmac.compare_digest(link.token_hash, hashed(token)):
            return None
        row = interrupt_store.get(session, link.interrupt_id)
        if row is None:
            return None
        used = attempt_store.original_attempt(session, link.actor_id, key_of(link.id))
        actor = actor_store.get_actor(session, link.actor_id)
        interrupt = view(row)
    problem = None
    if link.revoked_at is not None:
        problem = "This link was revoked."
    elif actor is None or actor.revoked_at is not None:
        problem = "The person this link was sent to may no longer answer."
    elif actor_binding(actor.credential_hash) != link.actor_binding:
        problem = "This link ended when its holder's credential was renewed."
    elif link.expires_at <= utcnow():
        problem = "This link has expired."
    elif used is not None:
        problem = f"This link was used already ({used.outcome})."
    elif interrupt.status != InterruptStatus.PENDING.value:
        problem = f"The interrupt is {interrupt.status}."
    return LinkPage(
        link.id,
        link.actor_id,
        tuple(link.decisions or ()),
        link.expires_at,
        interrupt,
        used,
        problem,
    )


def answer_with_link(
    token: str, decision: str, input: dict[str, Any] | None = None
) -> ResumeResult:
    """Submit ``decision`` (with ``input``) as the link's responder; never raises.

    A token this server did not sign, or whose link is gone, is recorded as unauthenticated
    (under no actor: nothing names one). Everything else is the gateway's to decide.
    """
    link_id = signed_link_id(token)
    found = _link_with_interrupt(link_id) if link_id is not None else None
    if found is None:
        return _unknown_link(token, decision)
    link, interrupt, kind = found
    if input is None and decision != Decision.APPROVED.value:
        input = {}  # (an approval without input starts from the interrupt's default input)
    payload = contract_payload(
        interrupt,
        actor=link.actor_id,
        actor_type=kind,
        decision=decision,
        input=input,
        idempotency_key=key_of(link.id),
        # The contract is for now: the link's own expiry is checked by the proof.
        expires_in=timedelta(minutes=5),
    )
    # Bound to what the link was issued for (which is what the message showed).
    payload.update(run_id=link.run_id, checkpoint_id=link.checkpoint_id)
    payload["evidence_hash"] = link.evidence_hash
    if link.policy_version is not None:
        payload["policy_version"] = link.policy_version
    return submit_proven(payload, LinkProof(link.id, token), secret=token)


def _link_with_interrupt(link_id: str) -> tuple[AnswerLink, InterruptView, str] | None:
    """The link, its interrupt, and what its actor is (human or service), if both exist."""
    with transaction(readonly=True) as session:
        link = store.get_link(session, link_id)
        row = interrupt_store.get(session, link.interrupt_id) if link is not None else None
        if link is None or row is None:
            return None
        actor = actor_store.get_actor(session, link.actor_id)
        return link, view(row), actor.kind if actor is not None else "human"


def _unknown_link(token: object, decision: str) -> ResumeResult:
    """Recorded as the gateway records a bad credential, the token redacted."""
    shown = redact_tokens(token) if isinstance(token, str) else "<not text>"
    payload = {"link": shown[:200], "decision": str(decision)[:40]}
    attempt = attempts.Attempt(payload, Credential(token))
    return attempts.record(
        attempt,
        ResumeOutcome.UNAUTHENTICATED,
        "not an answer link of this server (unsigned, altered, or its interrupt is gone)",
        claim=False,
    )


def revoke_links(
    *,
    by: str,
    link_id: str | None = None,
    actor_id: str | None = None,
    interrupt_id: str | None = None,
) -> list[str]:
    """Revoke the active links matching the filters (at least one), recording ``by``;
    returns their ids."""
    if link_id is None and actor_id is None and interrupt_id is None:
        raise LinkError(detail="name a link, an actor or an interrupt whose links to revoke")
    if not isinstance(by, str) or not by.strip():
        raise LinkError(detail="say who revokes (by)")
    with transaction() as session:
        return store.revoke(
            session,
            utcnow(),
            by.strip()[:200],
            link_id=link_id,
            actor_id=normal_actor_id(actor_id) if actor_id is not None else None,
            interrupt_id=interrupt_id,
        )


@dataclass(frozen=True)
class LinkView:
    id: str
    interrupt_id: str
    actor_id: str
    decisions: list[str]
    channel: str
    created_at: datetime
    expires_at: datetime
    status: str  # active, used (outcome), expired, revoked
    revoked_by: str | None


def list_links(
    *, interrupt_id: str | None = None, actor_id: str | None = None, limit: int = 1000
) -> list[LinkView]:
    """Links, newest first, each with what became of it."""
    now = utcnow()
    with transaction(readonly=True) as session:
        rows = store.list_links(
            session,
            interrupt_id=interrupt_id,
            actor_id=normal_actor_id(actor_id) if actor_id is not None else None,
            limit=limit,
        )
        found = []
        for link in rows:
            used = attempt_store.original_attempt(session, link.actor_id, key_of(link.id))
            if link.revoked_at is not None:
                status = "revoked"
            elif used is not None:
                status = f"used ({used.outcome})"
            elif link.expires_at <= now:
                status = "expired"
            else:
                status = "active"
            found.append(
                LinkView(
                    link.id,
                    link.interrupt_id,
                    link.actor_id,
                    list(link.decisions or []),
                    link.channel,
                    link.created_at,
                    link.expires_at,
                    status,
                    link.revoked_by,
                )
            )
    return found
