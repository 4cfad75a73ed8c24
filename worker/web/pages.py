"""What every page for people shares: the signed-in visitor, a page rendered from its
template, the way to sign in, the CSRF check of a posted form and the pages that refuse one.

The inbox, the console, bulk review and answer links render through these, so that a refused
form, a throttled visitor or a visitor who must sign in again gets the same page everywhere.
"""

from __future__ import annotations

import hmac
import json
from dataclasses import dataclass
from typing import Any

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from starlette.datastructures import FormData

from models.contracts import ActorView
from worker.web.auth import authenticated, client_of
from worker.web.bodies import FormRefused, form_of
from worker.web.sessions import COOKIE, SessionData
from worker.web.state import web_state

SIGN_IN = "/inbox/signin"
THROTTLED = "Too many refused attempts from here or for this actor. Wait a minute and try again."


@dataclass(frozen=True)
class Visitor:
    session: SessionData
    cookie: str
    actor: ActorView | None
    credential: str | None


def visitor_of(request: Request) -> Visitor | None:
    """The visitor signed in by this request's session cookie (``actor`` None: revoked since)."""
    cookie = request.cookies.get(COOKIE)
    loaded = web_state(request).sessions.load(cookie)
    if cookie is None or loaded is None:
        return None
    data, credential = loaded
    actor = authenticated(data.actor_id, credential) if credential else None
    return Visitor(data, cookie, actor, credential)


def render(request: Request, name: str, context: dict[str, Any], *, status: int = 200) -> Response:
    """The template ``name`` rendered with ``context``."""
    templates = web_state(request).templates
    return templates.TemplateResponse(request, name, context, status_code=status)


def message_page(
    request: Request, title: str, text: str, status: int, visitor: Visitor | None = None
) -> Response:
    """A page that says one thing: a refusal, an error, something not found."""
    context = {"visitor": visitor, "title": title, "message": text}
    return render(request, "message.html", context, status=status)


def to_signin() -> Response:
    return RedirectResponse(SIGN_IN, status_code=303)


def same_token(expected: str | None, sent: object) -> bool:
    """Whether a form sent the token expected, compared in constant time."""
    if not expected or not isinstance(sent, str):
        return False
    return hmac.compare_digest(expected.encode(), sent.encode("utf-8", "surrogatepass"))


def csrf_ok(visitor: Visitor | None, form: FormData) -> bool:
    return visitor is not None and same_token(visitor.session.csrf, form.get("csrf"))


def form_refused(request: Request, refused: FormRefused) -> Response:
    text = f"The form was not accepted: {refused}."
    return message_page(request, "Form refused", text, refused.status)


def csrf_refused(request: Request) -> Response:
    text = (
        "The form was not accepted: its CSRF token is missing or wrong. "
        "Reload the page and try again."
    )
    return message_page(request, "Form refused", text, 403)


def throttled(request: Request, text: str = THROTTLED) -> Response:
    return message_page(request, "Too many attempts", text, 429)


async def signed_in_form(
    request: Request, *, limited: bool = True
) -> tuple[Visitor, FormData] | Response:
    """A form posted by a signed-in visitor with its session's CSRF token; else the page that
    refuses it: an unreadable form, no session or credential (sign in), a wrong token, and
    (``limited``: a form that answers or acts) a client or actor refused too often already."""
    try:
        form = await form_of(request)
    except FormRefused as refused:
        return form_refused(request, refused)
    visitor = await run_in_threadpool(visitor_of, request)
    if visitor is None or visitor.credential is None:
        return to_signin()
    if not csrf_ok(visitor, form):
        return csrf_refused(request)
    if limited:
        limiter, client = web_state(request).limiter, client_of(request)
        if await run_in_threadpool(limiter.check, client, visitor.session.actor_id) is not None:
            return throttled(request)
    return visitor, form


def pretty(value: Any) -> str:
    """A value as the pages show it: indented JSON, keys sorted."""
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
