"""Bulk review in the inbox: pick open interrupts of one kind, read every evidence, confirm.

``GET /inbox/bulk`` lists what the signed-in actor may answer (of one kind at a time);
``POST /inbox/bulk/review`` shows the evidence of each picked interrupt in full and carries
what it showed (each binding) into the confirm form; ``POST /inbox/bulk/confirm`` answers
each with its own contract (worker.gateway.bulk_review) and shows each outcome.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from models.enums import Decision, InterruptKind, ResumeOutcome
from models.errors import InterludeError
from models.inbox_queries import MAX_PAGE, answerable_interrupts
from worker.gateway.bulk_review import Shown, answer_together, new_batch, select_for_review
from worker.web.auth import client_of
from worker.web.outcomes import headline_of
from worker.web.pages import (
    message_page,
    pretty,
    render,
    signed_in_form,
    to_signin,
    visitor_of,
)
from worker.web.state import web_state

router = APIRouter(prefix="/inbox/bulk", include_in_schema=False)


@router.get("")
def pick(request: Request, kind: str = InterruptKind.APPROVAL.value) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    try:
        page = answerable_interrupts(
            visitor.actor.roles, actor_id=visitor.actor.id, kind=kind, limit=MAX_PAGE
        )
    except InterludeError as exc:
        return message_page(request, "Review together", str(exc), 422, visitor)
    context = {
        "visitor": visitor,
        "items": page.items,
        "kind": kind,
        "kinds": [k.value for k in InterruptKind],
        # An answer that needs input is given one interrupt at a time, on its own form.
        "needs_input": {i.id for i in page.items if i.json_schema.get("required")},
    }
    return render(request, "bulk_pick.html", context)


@router.post("/review")
async def review(request: Request) -> Response:
    checked = await signed_in_form(request, limited=False)
    if isinstance(checked, Response):
        return checked
    visitor, form = checked
    decision = str(form.get("decision") or "")
    if decision not in (Decision.APPROVED.value, Decision.REJECTED.value):
        return message_page(request, "Review together", "Choose approve or reject.", 422, visitor)
    picked = [v for v in form.getlist("pick") if isinstance(v, str)]
    try:
        found = await run_in_threadpool(select_for_review, picked)
    except InterludeError as exc:
        return message_page(request, "Review together", str(exc), 422, visitor)
    context = {
        "visitor": visitor,
        "items": found,
        "decision": decision,
        "kind": found[0].kind,
        "batch": new_batch(),
        "pretty": pretty,
        # What each confirm binds to: exactly what this page shows.
        "bindings": {i.id: json.dumps(Shown.of(i).__dict__) for i in found},
    }
    return render(request, "bulk_review.html", context)


@router.post("/confirm")
async def confirm(request: Request) -> Response:
    checked = await signed_in_form(request)
    if isinstance(checked, Response):
        return checked
    visitor, form = checked
    state = web_state(request)
    client = client_of(request)
    try:
        shown = [_shown(v) for v in form.getlist("binding") if isinstance(v, str)]
    except (ValueError, TypeError):
        text = "The review's bindings are unreadable."
        return message_page(request, "Form refused", text, 422, visitor)
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
        return message_page(request, "Review together", str(exc), 422, visitor)
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
    return render(request, "bulk_outcome.html", context)


def _shown(text: str) -> Shown:
    data = json.loads(text)
    if not isinstance(data, dict):
        raise ValueError("not an object")
    fields = set(Shown.__dataclass_fields__)
    return Shown(**{k: v for k, v in data.items() if k in fields})
