"""The web inbox for people: sign in, see what waits for you, answer it with a generated form.

Pages are rendered on the server; there is no script. Every form carries a CSRF token: the
session's once signed in; before, the sign-in form's own, matched against a cookie of its own
(nothing is stored for a visitor who has not signed in). Every answer goes through
``submit_resume`` with the signed-in actor's credential.
"""

from __future__ import annotations

import json
import secrets
from typing import Any, get_args

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel
from starlette.datastructures import FormData

from models.contracts import AskGroupView, InterruptView, ResumeResult
from models.db import utcnow
from models.enums import InterruptStatus, ResumeOutcome
from models.errors import InterludeError, InterruptNotFoundError
from models.identity import actor_id_problem
from models.inbox_queries import answerable_interrupts
from worker.flows.schemas import json_schema_of, lookup
from worker.gateway.actors import redact_shaped
from worker.gateway.submit import submit_resume
from worker.interrupts import get_interrupt
from worker.runs import get_run
from worker.web.auth import authenticated, client_of
from worker.web.binding import CONTRACT_LIFETIME, new_key
from worker.web.bodies import FormRefused, form_of
from worker.web.forms import ARGS_PREFIX, args_schema_of, fields_of, input_from_form
from worker.web.outcomes import UNCONFIRMED, headline_of, log_resume, status_of
from worker.web.pages import (
    SIGN_IN,
    Visitor,
    csrf_ok,
    csrf_refused,
    form_refused,
    message_page,
    pretty,
    render,
    same_token,
    signed_in_form,
    throttled,
    to_signin,
    visitor_of,
)
from worker.web.sessions import COOKIE
from worker.web.state import web_state
from worker.web.visibility import readable_interrupt

router = APIRouter(prefix="/inbox", include_in_schema=False)
# The sign-in form's CSRF token, also in this cookie (sent back to the sign-in path only).
SIGN_IN_COOKIE = "interlude_signin"
SIGN_IN_SECONDS = 3600
# The three answers to a tool-call review, each a form of its own, and their decisions.
REVIEW_ACTIONS = {"approve": "approved", "edit": "approved", "reject": "rejected"}
EDIT_DENIED = "Denied: you may not approve the call as edited."


def _set_cookie(request: Request, response: Response, cookie: str) -> None:
    settings = web_state(request).settings
    response.set_cookie(
        COOKIE,
        cookie,
        max_age=settings.web_session_seconds,
        path="/",
        httponly=True,
        samesite="strict",
        secure=settings.web_secure_cookie,
    )


def _set_signin_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        SIGN_IN_COOKIE,
        token,
        max_age=SIGN_IN_SECONDS,
        path=SIGN_IN,
        httponly=True,
        samesite="strict",
        secure=web_state(request).settings.web_secure_cookie,
    )


@router.get("")
def inbox(request: Request, cursor: str | None = None, kind: str | None = None) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    try:
        page = answerable_interrupts(
            visitor.actor.roles, actor_id=visitor.actor.id, cursor=cursor, kind=kind
        )
    except InterludeError as exc:
        return message_page(request, "Inbox", str(exc), 422)
    return render(request, "inbox.html", {"visitor": visitor, "page": page, "kind": kind or ""})


@router.get("/signin")
def signin_form(request: Request) -> Response:
    visitor = visitor_of(request)
    if visitor is not None and visitor.actor is not None:
        return RedirectResponse("/inbox", status_code=303)
    # A new token per page, kept in the visitor's cookie rather than in a session: a visitor
    # who has not signed in costs the server nothing, however many come.
    token = secrets.token_urlsafe(32)
    response = render(request, "signin.html", {"csrf": token, "error": None})
    _set_signin_cookie(request, response, token)
    return response


@router.post("/signin")
async def signin(request: Request) -> Response:
    try:
        form = await form_of(request)
    except FormRefused as refused:
        return form_refused(request, refused)
    token = request.cookies.get(SIGN_IN_COOKIE)
    if not same_token(token, form.get("csrf")):
        return csrf_refused(request)
    assert token is not None
    actor_id = str(form.get("actor_id") or "").strip()
    credential = str(form.get("credential") or "").strip()
    state = web_state(request)
    client = client_of(request)
    if await run_in_threadpool(state.limiter.check, client, actor_id) is not None:
        return throttled(request)
    actor = await run_in_threadpool(authenticated, actor_id, credential)
    if actor is None:
        await run_in_threadpool(state.limiter.refused, client, actor_id)
        context = {
            "csrf": token,
            "error": "Unknown actor, revoked actor or wrong credential.",
            # What was typed, unless it cannot be an actor id: a credential pasted into the
            # wrong field is not sent back.
            "actor_id": redact_shaped(actor_id) if actor_id_problem(actor_id) else actor_id,
        }
        return render(request, "signin.html", context, status=401)
    # A new session id at sign-in: a session held before it is worth nothing after.
    state.sessions.end(request.cookies.get(COOKIE))
    cookie = state.sessions.start(actor.id, credential)
    response = RedirectResponse("/inbox", status_code=303)
    _set_cookie(request, response, cookie)
    response.delete_cookie(SIGN_IN_COOKIE, path=SIGN_IN, httponly=True, samesite="strict")
    return response


@router.post("/signout")
async def signout(request: Request) -> Response:
    try:
        form = await form_of(request)
    except FormRefused as refused:
        return form_refused(request, refused)
    visitor = await run_in_threadpool(visitor_of, request)
    if not csrf_ok(visitor, form):
        return csrf_refused(request)
    assert visitor is not None
    web_state(request).sessions.end(visitor.cookie)
    response = to_signin()
    settings = web_state(request).settings
    response.delete_cookie(
        COOKIE, path="/", httponly=True, samesite="strict", secure=settings.web_secure_cookie
    )
    return response


@router.get("/interrupts/{interrupt_id}")
def interrupt_page(request: Request, interrupt_id: str) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    try:
        interrupt = readable_interrupt(visitor.actor, interrupt_id)
    except InterruptNotFoundError as exc:
        return _not_found(request, exc)
    call = interrupt.review
    context = {
        "visitor": visitor,
        "interrupt": interrupt,
        "pending": interrupt.status == InterruptStatus.PENDING.value,
        "fields": fields_of(
            interrupt.json_schema, interrupt.previous_input, _declared_order(interrupt)
        ),
        "call": call,
        # The edit form: the arguments' fields, prefilled with the call as proposed.
        "edit_fields": fields_of(
            args_schema_of(interrupt.json_schema),
            call.args if call else None,
            _args_order(interrupt),
            prefix=ARGS_PREFIX,
        ),
        "may_answer": bool(set(visitor.actor.roles) & set(interrupt.roles)),
        "idempotency_key": new_key(visitor.actor.id),
        # One key per answer of a review: after a denied edit, approving as proposed (back
        # on the same page) is a new answer, not the denied one's key used again.
        "review_keys": {action: new_key(visitor.actor.id) for action in REVIEW_ACTIONS},
        "expires_at": (utcnow() + CONTRACT_LIFETIME).isoformat(),
        "pretty": pretty,
        "shown": _shown,
        # Sent back as submitted: the scope is bound to what the responder was shown.
        "scope_json": json.dumps(interrupt.scope),
        "group": _group_of(interrupt),
    }
    return render(request, "interrupt.html", context)


def _group_of(interrupt: InterruptView) -> AskGroupView | None:
    """The ask group the interrupt belongs to, as it stands (None: a lone interrupt)."""
    if interrupt.ask_group is None:
        return None
    groups = get_run(interrupt.run_id).ask_groups
    return next((g for g in groups if g.group == interrupt.ask_group), None)


@router.post("/interrupts/{interrupt_id}")
async def answer(request: Request, interrupt_id: str) -> Response:
    checked = await signed_in_form(request)
    if isinstance(checked, Response):
        return checked
    visitor, form = checked
    client = client_of(request)
    return await run_in_threadpool(_answer, request, visitor, interrupt_id, form, client)


def _answer(
    request: Request, visitor: Visitor, interrupt_id: str, form: FormData, client: str
) -> Response:
    text_form = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    try:
        if visitor.actor is None:  # (revoked since the page was shown)
            raise InterruptNotFoundError(interrupt_id=interrupt_id)
        interrupt = readable_interrupt(visitor.actor, interrupt_id)
    except InterruptNotFoundError as exc:
        # Not there, or not the actor's to read: submitted all the same (every refused answer
        # is recorded), with no input read from a form the actor was never shown.
        decision = text_form.get("decision") or ""
        _submit(request, visitor, _contract(visitor, interrupt_id, text_form, decision, {}), client)
        return to_signin() if visitor.actor is None else _not_found(request, exc)
    decision = text_form.get("decision") or ""
    action = text_form.get("action", "")
    if interrupt.review is not None and action in REVIEW_ACTIONS:
        decision = REVIEW_ACTIONS[action]
        submitted = _review_input(interrupt, action, text_form)
    elif decision == "approved":
        submitted = input_from_form(fields_of(interrupt.json_schema), text_form)
    else:
        # Reject releases the run with no input: a rejection need not fill the form.
        submitted = {}
    contract = _contract(visitor, interrupt_id, text_form, decision, submitted)
    result = _submit(request, visitor, contract, client)
    context = {"visitor": visitor, "interrupt": interrupt, "result": result, "pretty": pretty}
    context.update(_explain(result, interrupt.run_id, interrupt.id))
    if action == "edit" and result.outcome is ResumeOutcome.DENIED:
        context["headline"] = EDIT_DENIED
    return render(request, "outcome.html", context, status=status_of(result.outcome))


def _contract(
    visitor: Visitor,
    interrupt_id: str,
    text_form: dict[str, str],
    decision: str,
    submitted: dict[str, Any],
) -> dict[str, Any]:
    """The ``resume.v1`` contract the form stands for, as submitted (the gateway checks it)."""
    return {
        "schema_version": "resume.v1",
        "run_id": text_form.get("run_id"),
        "checkpoint_id": text_form.get("checkpoint_id"),
        "interrupt_id": interrupt_id,
        "actor": {"type": "human", "id": visitor.session.actor_id},
        "decision": decision,
        "input": submitted,
        "scope": _json(text_form.get("scope", "null")),
        "evidence_hash": text_form.get("evidence_hash"),
        "idempotency_key": text_form.get("idempotency_key"),
        "expires_at": text_form.get("expires_at"),
    }


def _submit(
    request: Request, visitor: Visitor, contract: dict[str, Any], client: str
) -> ResumeResult:
    assert visitor.credential is not None
    result = submit_resume(contract, visitor.credential)
    log_resume(result, actor=visitor.session.actor_id, via="the inbox")
    if result.outcome is not ResumeOutcome.ACCEPTED:
        web_state(request).limiter.refused(client, visitor.session.actor_id)
    return result


def _not_found(request: Request, missing: InterruptNotFoundError) -> Response:
    """The page of an interrupt that is not there, or not the visitor's to read: the same."""
    return message_page(request, "Not found", str(missing), 404)


def _explain(result: ResumeResult, run_id: str, interrupt_id: str) -> dict[str, Any]:
    """What the outcome page says beyond the headline: the run's state, the newer interrupt."""
    context: dict[str, Any] = {"headline": headline_of(result.outcome), "newer": None}
    if result.outcome in {ResumeOutcome.ACCEPTED, ResumeOutcome.DUPLICATE}:
        context["run_state"] = get_run(run_id).state
    if result.outcome is ResumeOutcome.STALE:
        current = get_interrupt(interrupt_id)
        newer = current.superseded_by
        if newer is None:
            waiting = [i.id for i in get_run(run_id).pending_interrupts if i.id != interrupt_id]
            newer = waiting[0] if waiting else None
        context["newer"] = newer
        context["current_status"] = current.status
    if result.outcome is ResumeOutcome.RENEWED_REVIEW_REQUIRED:
        if result.new_interrupt_id:
            context["renewed"] = get_interrupt(result.new_interrupt_id)
        else:
            # The revalidation failed: no evidence changed, none is new.
            context["headline"] = UNCONFIRMED
    return context


def _review_input(interrupt: InterruptView, action: str, form: dict[str, str]) -> dict[str, Any]:
    """A review's input: nothing (approve as proposed), the edited arguments, or a message."""
    if action == "edit":
        fields = fields_of(args_schema_of(interrupt.json_schema), prefix=ARGS_PREFIX)
        return {"args": input_from_form(fields, form)}
    message = form.get("message", "").strip()
    return {"message": message} if action == "reject" and message else {}


def _args_order(interrupt: InterruptView) -> list[str] | None:
    """The arguments' declared order, when this process has the review's schema."""
    if _declared_order(interrupt) is None:
        return None
    model = lookup(interrupt.schema_name, interrupt.schema_version)
    args = model.model_fields.get("args") if model is not None else None
    found = [a for a in get_args(args.annotation) if isinstance(a, type)] if args else []
    declared = next((a for a in found if issubclass(a, BaseModel)), None)
    return list(declared.model_fields) if declared is not None else None


def _declared_order(interrupt: InterruptView) -> list[str] | None:
    """The input model's field order, when this process has the schema the interrupt recorded."""
    model = lookup(interrupt.schema_name, interrupt.schema_version)
    if model is None or json_schema_of(model) != interrupt.json_schema:
        return None
    return list(model.model_fields)


def _json(text: str) -> Any:
    # Not JSON, or nested past the parser's stack: passed on as typed, the gateway refuses it.
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return text


def _shown(value: Any) -> str:
    """An argument of a call as the page shows it: text as it is, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
