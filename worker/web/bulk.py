"""Bulk review in the inbox: pick open interrupts of one kind, read every evidence, confirm.

``GET /inbox/bulk`` lists what the signed-in actor may answer (of one kind at a time);
``POST /inbox/bulk/review`` shows the evidence of each picked interrupt in full and carries
what it showed (each binding) into the confirm form; ``POST /inbox/bulk/confirm`` answers
each with its own contract (worker.gateway.bulk_review) and shows each outcome.
"""

from __future__ import annotations

import json
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response
from starlette.datastructures import FormData

from models.enums import Decision, InterruptKind, ResumeOutcome
from models.errors import InterludeError
from models.inbox_queries import MAX_PAGE, answerable_interrupts
from worker.gateway.bulk_review import Shown, answer_together, new_batch, select_for_review
from worker.web.auth import client_of
from worker.web.bodies import FormRefused, form_of
from worker.web.inbox import Visitor, _csrf_ok, _visitor
from worker.web.outcomes import headline_of
from worker.web.state import web_state

router = APIRouter(prefix="/inbox/bulk", include_in_schema=False)


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    templates = web_state(request).templates
    return templates.TemplateResponse(request, name, context, status_code=status)


def _message(
    request: Request, visitor: Visitor | None, title: str, text: str, status: int
) -> Response:
    context = {"visitor": visitor, "title": title, "message": text}
    return _page(request, "message.html", context, status)


def _pretty(value: Any) -> str:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)


def _signin() -> Response:
    from fastapi.responses import RedirectResponse

    return RedirectResponse("/inbox/signin", status_code=303)


@router.get("")
def pick(request: Request, kind: str = InterruptKind.APPROVAL.value) -> Response:
    visitor = _visitor(request)
    if visitor is None or visitor.actor is None:
        return _signin()
    try:
        page = answerable_interrupts(
            visitor.actor.roles, actor_id=visitor.actor.id, kind=kind, limit=MAX_PAGE
        )
    except InterludeError as exc:
        return _message(request, visitor, "Review together", str(exc), 422)
    context = {
        "visitor": visitor,
        "items": page.items,
        "kind": kind,
        "kinds": [k.value for k in InterruptKind],
        # An answer that needs input is given one interrupt at a time, on its own form.
        "needs_input": {i.id for i in page.items if i.json_schema.get("required")},
    }
    return _page(request, "bulk_pick.html", context)


async def _form(request: Request) -> tuple[Visitor | None, FormData | Response]:
    try:
        form = await form_of(request)
    except FormRefused as refused:
        return None, _message(
            request, None, "Form refused", f"The form was not accepted: {refused}.", refused.status
        )
    visitor = await run_in_threadpool(_visitor, request)
    if visitor is None or visitor.credential is None:
        return None, _signin()
    if not _csrf_ok(visitor, form):
        text = "The form was not accepted: its CSRF token is missing or wrong. Reload the page."
        return visitor, _message(request, visitor, "Form refused", text, 403)
    return visitor, form


@router.post("/review")
async def review(request: Request) -> Response:
    visitor, form = await _form(request)
    if not isinstance(form, FormData):
        return form
    assert visitor is not None
    decision = str(form.get("decision") or "")
    if decision not in (Decision.APPROVED.value, Decision.REJECTED.value):
        return _message(request, visitor, "Review together", "Choose approve or reject.", 422)
    picked = [v for v in form.getlist("pick") if isinstance(v, str)]
    try:
        found = await run_in_threadpool(select_for_review, picked)
    except InterludeError as exc:
        return _message(request, visitor, "Review together", str(exc), 422)
    context = {
        "visitor": visitor,
        "items": found,
        "decision": decision,
        "kind": found[0].kind,
        "batch": new_batch(),
        "pretty": _pretty,
        # What each confirm binds to: exactly what this page shows.
        "bindings": {i.id: json.dumps(Shown.of(i).__dict__) for i in found},
    }
    return _page(request, "bulk_review.html", context)


@router.post("/confirm")
async def confirm(request: Request) -> Response:
    visitor, form = await _form(request)
    if not isinstance(form, FormData):
        return form
    assert visitor is not None and visitor.credential is not None
    state = web_state(request)
    client = client_of(request)
    if await run_in_threadpool(state.limiter.check, client, visitor.session.actor_id) is not None:
        return _message(request, visitor, "Too many attempts", "Wait a minute and try again.", 429)
    try:
        shown = [_shown(v) for v in form.getlist("binding") if isinstance(v, str)]
    except (ValueError, TypeError):
        return _message(
            request, visitor, "Form refused", "The review's bindings are unreadable.", 422
        )
    decision = str(form.get("decision") or "")
    batch = str(form.get("batch") or "")[:40] or None
    try:
        results = await run_in_threadpool(
            lambda: answer_together(
                shown,
                actor=visitor.session.actor_id or "",
                credential=visitor.credential or "",
                decision=decision,
                batch=batch,
            )
        )
    except InterludeError as exc:
        return _message(request, visitor, "Review together", str(exc), 422)
    if any(r.outcome is not ResumeOutcome.ACCEPTED for r in results):
        # One count per batch: a stale one among many is not an attack.
        await run_in_threadpool(state.limiter.refused, client, visitor.session.actor_id)
    counts: dict[str, int] = {}
    for r in results:
        counts[r.outcome.value] = counts.get(r.outcome.value, 0) + 1
    context = {
        "visitor": visitor,
        "rows": list(zip(shown, results, strict=True)),
        "counts": counts,
        "headline": headline_of,
    }
    return _page(request, "bulk_outcome.html", context)


def _shown(text: str) -> Shown:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    fields = set(Shown.__dataclass_fields__)
    return Shown(**{k: v for k, v in data.items() if k in fields})
