"""The JSON resume API: list and read interrupts, submit ``resume.v1``, read a run's timeline.

Callers authenticate with ``Authorization: Bearer <credential>``; reads name the actor in
``X-Interlude-Actor`` and a resume names it in its contract. Every resume goes through
``submit_resume`` and is recorded there, whatever its outcome.
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Header, HTTPException, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel, Field

from models.contracts import (
    ActorView,
    InterruptView,
    ResumeResult,
    RunView,
)
from models.enums import InterruptKind, ResumeOutcome
from models.errors import InvalidInputError
from models.inbox_queries import CURSOR_PATTERN, MAX_PAGE, answerable_interrupts
from models.settings import LONGEST_SECONDS
from worker.gateway.events import send_event
from worker.gateway.submit import submit_resume
from worker.interrupts import (
    attempts_in_view,
    count_resume_attempts,
)
from worker.ops.step_history import StepView, list_steps
from worker.present.timeline import Entry, timeline
from worker.runs import list_checkpoints, list_effects, list_events
from worker.web.auth import ACTOR_HEADER, authenticated, client_of
from worker.web.binding import contract_for
from worker.web.bodies import read_capped
from worker.web.outcomes import STATUS, log_resume, status_of
from worker.web.state import web_state
from worker.web.throttle import Throttled
from worker.web.visibility import readable_interrupt, readable_run

router = APIRouter(prefix="/v1", tags=["resume API"])
# Beyond this a body is kept only as its beginning: the gateway records it as malformed.
MAX_BODY = 256 * 1024
BEARER = HTTPBearer(auto_error=False, description="the actor's credential (ilc_…)")


class Refused(BaseModel):
    """Why a request was refused, in one line."""

    detail: str


_RETRY_AFTER = {"Retry-After": {"description": "seconds to wait", "schema": {"type": "string"}}}
THROTTLED: dict[int | str, dict[str, Any]] = {
    429: {
        "model": Refused,
        "description": "too many refused attempts from this client or actor",
        "headers": _RETRY_AFTER,
    }
}
READ_REFUSALS: dict[int | str, dict[str, Any]] = {
    401: {
        "model": Refused,
        "description": "unknown actor, revoked actor or bad credential",
        "headers": {"WWW-Authenticate": {"schema": {"type": "string"}}},
    },
    **THROTTLED,
}
# Not there, or not the caller's to read: the same answer (worker.web.visibility).
NOT_FOUND: dict[int | str, dict[str, Any]] = {
    **READ_REFUSALS,
    404: {"model": Refused, "description": "no such record the caller may read"},
}


class InterruptPage(BaseModel):
    items: list[InterruptView]
    next_cursor: str | None


class InterruptDetail(BaseModel):
    interrupt: InterruptView
    # A resume.v1 contract bound to this interrupt: fill in ``input`` and submit it.
    template: dict[str, Any]


class RunDetail(BaseModel):
    run: RunView
    # The newest attempts and every accepted one (all of them: GET attempts of the CLI).
    timeline: list[Entry]
    attempt_counts: dict[str, int]


def throttled_response(throttled: Throttled) -> JSONResponse:
    return JSONResponse(
        {"detail": f"too many refused attempts from this {throttled.scope}; retry later"},
        status_code=429,
        headers={"Retry-After": str(throttled.retry_after)},
    )


def caller(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
    actor_id: Annotated[str | None, Header(alias=ACTOR_HEADER)] = None,
) -> ActorView:
    """The authenticated actor; a failed authentication counts as a refused attempt."""
    limiter = web_state(request).limiter
    client = client_of(request)
    throttled = limiter.check(client, actor_id)
    if throttled is not None:
        raise HTTPException(
            429,
            f"too many refused attempts from this {throttled.scope}; retry later",
            headers={"Retry-After": str(throttled.retry_after)},
        )
    actor = authenticated(actor_id, credentials.credentials if credentials else None)
    if actor is None:
        limiter.refused(client, actor_id)
        raise HTTPException(
            401,
            f"unknown actor, revoked actor or bad credential (send {ACTOR_HEADER} and "
            "Authorization: Bearer <credential>)",
            headers={"WWW-Authenticate": "Bearer"},
        )
    return actor


Caller = Annotated[ActorView, Depends(caller)]


def _age(description: str) -> Any:
    # Finite and at most what a deadline may be: 1e308 or inf would overflow a date.
    return Query(ge=0, le=LONGEST_SECONDS, allow_inf_nan=False, description=description)


@router.get(
    "/interrupts",
    operation_id="list_interrupts",
    response_model=InterruptPage,
    responses=READ_REFUSALS,
)
def pending_interrupts(
    actor: Caller,
    kind: InterruptKind | None = None,
    min_age: Annotated[float | None, _age("seconds waited, at least")] = None,
    max_age: Annotated[float | None, _age("seconds waited, at most")] = None,
    cursor: Annotated[
        str | None, Query(pattern=CURSOR_PATTERN, description="the next_cursor of a page")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> InterruptPage:
    """Pending interrupts the caller may answer (by role), oldest first."""
    try:
        page = answerable_interrupts(
            actor.roles,
            actor_id=actor.id,
            kind=kind,
            min_age=min_age,
            max_age=max_age,
            cursor=cursor,
            limit=limit,
        )
    except InvalidInputError as exc:
        # The parameters were checked above but the cursor, which only the query can read.
        problem = {"type": "value_error", "loc": ("query", "cursor"), "msg": str(exc)}
        raise RequestValidationError([{**problem, "input": cursor}]) from None
    return InterruptPage(items=page.items, next_cursor=page.next_cursor)


@router.get(
    "/interrupts/{interrupt_id}",
    operation_id="get_interrupt",
    response_model=InterruptDetail,
    responses=NOT_FOUND,
)
def interrupt_detail(interrupt_id: str, actor: Caller) -> InterruptDetail:
    """One interrupt as a responder sees it, and a ``resume.v1`` template bound to it.

    Readable by the roles it asks and its flow's operator and viewer roles; to anyone else it
    is not found."""
    interrupt = readable_interrupt(actor, interrupt_id)
    return InterruptDetail(
        interrupt=interrupt, template=contract_for(interrupt, actor.id, actor_type=actor.kind)
    )


@router.get("/runs/{run_id}", operation_id="get_run", response_model=RunDetail, responses=NOT_FOUND)
def run_detail(run_id: str, actor: Caller) -> RunDetail:
    """A run's state and its timeline: checkpoints, interrupts, attempts, effects, events.

    Readable by its flow's operator and viewer roles and the roles its interrupts ask; to
    anyone else it is not found."""
    run, interrupts = readable_run(actor, run_id)
    entries = timeline(
        list_checkpoints(run.id),
        list_events(run.id),
        list_effects(run.id),
        interrupts,
        attempts_in_view(run.id),
    )
    return RunDetail(run=run, timeline=entries, attempt_counts=count_resume_attempts(run.id))


@router.get(
    "/runs/{run_id}/steps",
    operation_id="list_steps",
    response_model=list[StepView],
    responses=NOT_FOUND,
)
def run_steps(run_id: str, actor: Caller) -> list[StepView]:
    """Each step the run executed: when it started, how long it took, what it changed.

    Readable as the run is (``run_detail``); to anyone else it is not found."""
    readable_run(actor, run_id)
    return list_steps(run_id)


_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {
        "model": ResumeResult,
        "description": ", ".join(o.value for o, c in STATUS.items() if c == code),
    }
    for code in sorted(set(STATUS.values()))
}
_RESPONSES.update(THROTTLED)


def _example(summary: str, decision: str, input: dict[str, Any]) -> dict[str, Any]:
    contract = {
        "schema_version": "resume.v1",
        "run_id": "3f1c…",
        "checkpoint_id": "9a2e…",
        "interrupt_id": "c07d…",
        "actor": {"type": "human", "id": "mia"},
        "decision": decision,
        "input": input,
        "scope": None,
        "evidence_hash": "sha256:…",
        "idempotency_key": "mia-c07d-1",
        "expires_at": "2026-12-03T14:00:00Z",
    }
    return {"summary": summary, "value": contract}


# A tool-call review (``review`` on the interrupt) takes {"args": ..., "message": ...}.
RESUME_EXAMPLES = {
    "answer": _example("an answer: the input the interrupt's schema asks for", "approved", {}),
    "approve_call": _example("a tool-call review: approve the call as proposed", "approved", {}),
    "edit_call": _example(
        "a tool-call review: approve the call with edited arguments (all of them; the edited "
        "call is authorized again, and refused as denied beyond the actor's authority)",
        "approved",
        {"args": {"order": "B-7", "amount": 250}},
    ),
    "reject_call": _example(
        "a tool-call review: reject the call, telling the agent why",
        "rejected",
        {"message": "refund the damaged item only"},
    ),
}


@router.post(
    "/resume",
    operation_id="submit_resume",
    response_model=ResumeResult,
    status_code=202,
    # The body, a ResumeContract, is read here (whatever arrives is recorded): the document
    # describes it (worker.web.openapi).
    responses=_RESPONSES,
)
async def resume(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> JSONResponse:
    """Submit a ``resume.v1`` contract; the response is the recorded ``ResumeResult``."""
    contract = await _body(request)
    actor = contract.get("actor") if isinstance(contract, dict) else None
    actor_id = actor.get("id") if isinstance(actor, dict) else None
    actor_key = actor_id if isinstance(actor_id, str) else None
    limiter = web_state(request).limiter
    client = client_of(request)
    throttled = await run_in_threadpool(limiter.check, client, actor_key)
    if throttled is not None:
        return throttled_response(throttled)
    credential = credentials.credentials if credentials else ""
    result = await run_in_threadpool(submit_resume, contract, credential)
    log_resume(result, actor=actor_id, via="the API")
    if result.outcome is not ResumeOutcome.ACCEPTED:
        await run_in_threadpool(limiter.refused, client, actor_key)
    headers = {"WWW-Authenticate": "Bearer"} if result.outcome == "unauthenticated" else None
    return JSONResponse(
        result.model_dump(mode="json"), status_code=status_of(result.outcome), headers=headers
    )


async def _body(request: Request) -> Any:
    """The submitted JSON, or the text as sent when it is not JSON (recorded as malformed)."""
    raw, over = await read_capped(request, MAX_BODY)
    if over:
        return raw.decode("utf-8", "replace")
    try:
        return json.loads(raw)
    except (ValueError, RecursionError):
        # RecursionError: nesting deeper than the parser's stack (a body of "[[[[..."); it is
        # malformed like any text that is not JSON, and recorded as such.
        return raw.decode("utf-8", "replace")


class EventSender(BaseModel):
    type: Literal["human", "service"] = "service"
    id: str = Field(min_length=1, max_length=200)


class EventSubmission(BaseModel):
    """An event for a run (``event.v1``): kept until the run asks for it, if it does not yet.

    Documents the body (read as sent: whatever arrives is recorded); its bounds are those
    ``send_event`` refuses past, as malformed."""

    run_id: str = Field(min_length=1, max_length=200)
    event: str = Field(min_length=1, max_length=200)
    payload: dict[str, Any]
    actor: EventSender
    idempotency_key: str = Field(min_length=1, max_length=200)


@router.post(
    "/events",
    operation_id="send_event",
    response_model=ResumeResult,
    status_code=202,
    responses=_RESPONSES,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/json": {"schema": EventSubmission.model_json_schema()}},
        }
    },
)
async def event(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)],
) -> JSONResponse:
    """Send a run an event its flow declares; the response is the recorded result
    (``accepted``: the run waited on it; ``kept``: it takes it when it asks)."""
    body = await _body(request)
    fields = body if isinstance(body, dict) else {}
    given = fields.get("actor")
    actor: dict[str, Any] = given if isinstance(given, dict) else {}
    actor_id = actor.get("id") if isinstance(actor.get("id"), str) else None
    limiter = web_state(request).limiter
    client = client_of(request)
    throttled = await run_in_threadpool(limiter.check, client, actor_id)
    if throttled is not None:
        return throttled_response(throttled)
    result = await run_in_threadpool(
        lambda: send_event(
            fields.get("run_id"),  # type: ignore[arg-type]
            fields.get("event"),  # type: ignore[arg-type]
            fields.get("payload"),
            actor=actor_id or "",
            actor_type=actor.get("type", "service"),
            credential=credentials.credentials if credentials else "",
            idempotency_key=fields.get("idempotency_key"),  # type: ignore[arg-type]
        )
    )
    if result.outcome not in (ResumeOutcome.ACCEPTED, ResumeOutcome.KEPT):
        await run_in_threadpool(limiter.refused, client, actor_id)
    headers = {"WWW-Authenticate": "Bearer"} if result.outcome == "unauthenticated" else None
    return JSONResponse(
        result.model_dump(mode="json"), status_code=status_of(result.outcome), headers=headers
    )
