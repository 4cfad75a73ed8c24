"""Answer links on the web: ``GET /inbox/a/<token>`` shows, ``POST`` to it confirms.

Opening a link reads and changes nothing, so that a mail scanner or a link preview that
fetches it answers nothing. The confirm form posts back to the same address: the token in
it is the only secret, so it is also what a forged cross-site post would lack. The token is
redacted from the server's access log (``RedactLinkTokens``).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import Response

from models.contracts import InterruptView
from models.enums import InterruptStatus, ResumeOutcome
from worker.gateway.answer_links import LinkPage, answer_with_link, link_page, redact_tokens
from worker.interrupts import get_interrupt
from worker.runs import get_run
from worker.web.auth import client_of
from worker.web.bodies import FormRefused, form_of
from worker.web.forms import fields_of, input_from_form
from worker.web.outcomes import headline_of, status_of
from worker.web.pages import form_refused, message_page, pretty, render, throttled
from worker.web.state import web_state

router = APIRouter(prefix="/inbox/a", include_in_schema=False)
# Refusals through links are counted per client and against this name, not a person's.
LINK_ACTOR = "answer-link"


class RedactLinkTokens(logging.Filter):
    """Link tokens out of a record's arguments (uvicorn's access log quotes the path)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple):
            record.args = tuple(redact_tokens(a) if isinstance(a, str) else a for a in record.args)
        if isinstance(record.msg, str):
            record.msg = redact_tokens(record.msg)
        return True


def install_redaction() -> None:
    for name in ("uvicorn.access", "uvicorn.error"):
        logger = logging.getLogger(name)
        if not any(isinstance(f, RedactLinkTokens) for f in logger.filters):
            logger.addFilter(RedactLinkTokens())


def _page(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    # No one is signed in on a link's pages: the link is the only credential.
    return render(request, name, {"visitor": None, **context}, status=status)


def _not_a_link(request: Request) -> Response:
    text = (
        "This is not a valid answer link: it may be mistyped, cut short by the mail program, "
        "or its interrupt is gone. Answer from the inbox instead."
    )
    return message_page(request, "Not an answer link", text, 404)


@router.get("/{token}")
def show(request: Request, token: str) -> Response:
    page = link_page(token)
    if page is None:
        return _not_a_link(request)
    return _page(request, "link.html", _context(page, token))


def _context(page: LinkPage, token: str) -> dict[str, Any]:
    interrupt = page.interrupt
    required = bool(interrupt.json_schema.get("required"))
    return {
        "link": page,
        "interrupt": interrupt,
        "token": token,
        "pretty": pretty,
        # The input form only when the answer needs one; else the buttons confirm.
        "fields": fields_of(interrupt.json_schema, interrupt.previous_input) if required else [],
        "newer": _newer(interrupt),
    }


@router.post("/{token}")
async def confirm(request: Request, token: str) -> Response:
    try:
        form = await form_of(request)
    except FormRefused as refused:
        return form_refused(request, refused)
    state = web_state(request)
    client = client_of(request)
    if await run_in_threadpool(state.limiter.check, client, LINK_ACTOR) is not None:
        return throttled(
            request, "Too many refused attempts from here. Wait a minute and try again."
        )
    return await run_in_threadpool(_confirm, request, token, form, client)


def _confirm(request: Request, token: str, form: Any, client: str) -> Response:
    decision = str(form.get("decision") or "")
    page = link_page(token)
    submitted = None
    if page is not None and decision == "approved" and page.interrupt.json_schema.get("required"):
        text_form = {k: v for k, v in form.multi_items() if isinstance(v, str)}
        submitted = input_from_form(fields_of(page.interrupt.json_schema), text_form)
    result = answer_with_link(token, decision, submitted)
    if result.outcome is not ResumeOutcome.ACCEPTED:
        web_state(request).limiter.refused(client, LINK_ACTOR)
    interrupt = _current(result.interrupt_id)
    context: dict[str, Any] = {
        "result": result,
        "headline": headline_of(result.outcome),
        "interrupt": interrupt,
        "newer": _newer(interrupt) if interrupt is not None else None,
        "run_state": None,
        "pretty": pretty,
    }
    if result.outcome in {ResumeOutcome.ACCEPTED, ResumeOutcome.DUPLICATE} and result.run_id:
        context["run_state"] = get_run(result.run_id).state
    return _page(request, "link_outcome.html", context, status=status_of(result.outcome))


def _current(interrupt_id: str | None) -> InterruptView | None:
    if interrupt_id is None:
        return None
    try:
        return get_interrupt(interrupt_id)
    except Exception:
        return None


def _newer(interrupt: InterruptView) -> str | None:
    """Where the run waits now, when ``interrupt`` no longer does: its successor, else
    another interrupt of the run still pending."""
    if interrupt.status == InterruptStatus.PENDING.value:
        return None
    if interrupt.superseded_by:
        return interrupt.superseded_by
    waiting = [i.id for i in get_run(interrupt.run_id).pending_interrupts if i.id != interrupt.id]
    return waiting[0] if waiting else None
