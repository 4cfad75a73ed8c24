"""``POST /v1/slack/actions``: Slack's interactive callbacks (worker.ops.notify_slack).

The raw body is read within a bound and verified before anything else; Slack is answered
at once, and the message is updated through the callback's ``response_url`` by the updater
(``app.state.slack_updater``: tests put their own, nothing here calls the network itself).
"""

from __future__ import annotations

import logging
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse, Response

from worker.web.api import Refused
from worker.web.auth import client_of
from worker.web.bodies import read_capped
from worker.web.state import web_state

router = APIRouter(tags=["chat"])
log = logging.getLogger(__name__)


def _updater(request: Request) -> Any:
    from worker.ops import notify_slack

    return getattr(request.app.state, "slack_updater", None) or notify_slack.update_by_response_url


def _refused(why: str) -> dict[str, Any]:
    return {"model": Refused, "description": why}


@router.post(
    "/v1/slack/actions",
    summary="Slack interactive callbacks (signed by Slack)",
    operation_id="slack_actions",
    response_class=Response,
    responses={
        200: {"description": "the action was handled (the answer recorded, whatever it was)"},
        400: _refused("the callback holds no action interlude can read"),
        401: _refused("Slack's request signature is missing or wrong"),
        413: _refused("the body is larger than a callback can be"),
        429: _refused("too many refused requests from this client"),
        503: _refused("Slack is not configured here (INTERLUDE_SLACK_SIGNING_SECRET)"),
    },
)
async def slack_actions(request: Request) -> Response:
    from worker.ops import notify_slack

    state = web_state(request)
    client = client_of(request)
    if await run_in_threadpool(state.limiter.check, client, None) is not None:
        return JSONResponse({"detail": "too many refused requests"}, status_code=429)
    body, over = await read_capped(request, notify_slack.MAX_BODY)
    if over:
        return JSONResponse({"detail": "body too large"}, status_code=413)
    handled = await run_in_threadpool(notify_slack.handle_action, body, dict(request.headers))
    if handled.status == 503:
        return JSONResponse(
            {"detail": "Slack is not configured here (INTERLUDE_SLACK_SIGNING_SECRET)"},
            status_code=503,
        )
    if handled.status != 200:
        await run_in_threadpool(state.limiter.refused, client, None)
        reason = handled.result.reason if handled.result else "refused"
        return JSONResponse({"detail": reason}, status_code=handled.status)
    if handled.update is not None and handled.response_url:
        try:
            await run_in_threadpool(_updater(request), handled.response_url, handled.update)
        except Exception as exc:
            # The answer is recorded whatever Slack's message shows; say so in the log.
            log.warning(
                "updating the Slack message failed (%s)",
                type(exc).__name__,
                extra={"action": "slack_update_failed"},
            )
    return Response(status_code=200)
