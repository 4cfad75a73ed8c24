"""Runs over HTTP: start, list, cancel, pause, retry and fork, as the CLI's verbs do.

Callers authenticate as for reads (``Authorization: Bearer`` and ``X-Interlude-Actor``).
Starting needs one of the flow's operator or starter roles (``Flow(starter_roles=...)``);
the other verbs are the CLI's operator actions (``cancel_run``, ``pause_run``, ``retry_run``,
``fork_run``), authorized and recorded by them: one of the flow's operator roles, every
refusal on the run's record. A run the caller may not read answers as a missing one, word for
word (the refused action is still recorded on it). Ids may be unique prefixes (6+).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query, Request, Security
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPAuthorizationCredentials
from pydantic import BaseModel, ConfigDict, ValidationError

from models.contracts import ActorView
from models.enums import RunState
from models.errors import (
    ConfigurationError,
    InvalidInputError,
    InvalidTransitionError,
    OperatorDeniedError,
    OperatorRefusedError,
    OperatorUnauthenticatedError,
    RunNotFoundError,
    StaleStateError,
    StartRefusedError,
    UnknownFlowError,
)
from models.settings import LONGEST_SECONDS
from worker.forks import fork_run
from worker.gateway import authority
from worker.operate import retry_run
from worker.runs import cancel_run, get_run, pause_run, start_run
from worker.web.api import BEARER, Caller
from worker.web.auth import ACTOR_HEADER, authenticated, client_of
from worker.web.bodies import read_capped
from worker.web.run_listing import MAX_PAGE, Filters, RunPage, readable, runs_page
from worker.web.state import web_state

router = APIRouter(prefix="/v1", tags=["runs API"])
# A run's input is the largest part of any of these bodies.
MAX_BODY = 256 * 1024


class Refusal(BaseModel):
    detail: str


class StartRequest(BaseModel):
    """Start a run of ``flow``; the same ``idempotency_key`` starts it once."""

    model_config = ConfigDict(extra="forbid")
    flow: str
    input: Any = None
    idempotency_key: str | None = None


class Started(BaseModel):
    run_id: str
    flow: str
    # False: the key had started this run before; nothing new started.
    created: bool
    state: str


class ReasonRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")
    reason: str = ""


class PauseRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ForkRequest(BaseModel):
    """Start a new run from the checkpoint before ``from_step``."""

    model_config = ConfigDict(extra="forbid")
    from_step: str
    # Replaces the origin's input (checked by the flow's input model); absent: the origin's.
    input: Any = None
    # Call again the effects the origin applied from there on (default: their receipts).
    repeat_effects: bool = False


class Acted(BaseModel):
    run_id: str
    state: str
    # The actor as recorded, ``kind:id``.
    by: str


class Forked(BaseModel):
    run_id: str
    forked_from: str
    from_step: str
    by: str


def _refusals(*codes: int, **told: str) -> dict[int | str, dict[str, Any]]:
    """The refusals an operation answers with; ``told`` (``s404=...``) words one its own way."""
    said = {
        401: "unknown actor, revoked actor or bad credential",
        403: "the actor holds none of the roles this needs (recorded)",
        404: "no such run the caller may read",
        409: "the run's state does not allow it",
        422: "the request is malformed or names nothing it could act on",
        429: "too many refused attempts from this client or actor",
    }
    said.update({int(code[1:]): text for code, text in told.items()})
    return {code: {"model": Refusal, "description": said[code]} for code in codes}


def _body_schema(model: type[BaseModel], required: bool = True) -> dict[str, Any]:
    content = {"application/json": {"schema": model.model_json_schema()}}
    return {"requestBody": {"required": required, "content": content}}


def _refused(status: int, detail: str) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return JSONResponse({"detail": detail}, status_code=status, headers=headers)


async def _parsed(request: Request, model: type[BaseModel]) -> BaseModel | JSONResponse:
    """The body as ``model`` (an empty body: its defaults), or the 422 naming what is wrong."""
    raw, over = await read_capped(request, MAX_BODY)
    if over:
        return _refused(413, f"the body is larger than {MAX_BODY // 1024} KB")
    try:
        data = json.loads(raw) if raw.strip() else {}
    except (ValueError, RecursionError):
        return _refused(422, "the body is not JSON")
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "body"
        return _refused(422, f"{where}: {first['msg']}")


def _who(request: Request, actor_id: str | None, credential: str) -> ActorView | JSONResponse:
    """The authenticated actor, or the 429 / 401 to answer (a failure counts as refused)."""
    limiter = web_state(request).limiter
    client = client_of(request)
    throttled = limiter.check(client, actor_id)
    if throttled is not None:
        return JSONResponse(
            {"detail": f"too many refused attempts from this {throttled.scope}; retry later"},
            status_code=429,
            headers={"Retry-After": str(throttled.retry_after)},
        )
    actor = authenticated(actor_id, credential)
    if actor is None:
        limiter.refused(client, actor_id)
        return _refused(
            401,
            f"unknown actor, revoked actor or bad credential (send {ACTOR_HEADER} and "
            "Authorization: Bearer <credential>)",
        )
    return actor


Credentials = Annotated[HTTPAuthorizationCredentials | None, Security(BEARER)]
ActorHeader = Annotated[str | None, Header(alias=ACTOR_HEADER)]


@router.post(
    "/runs",
    operation_id="start_run",
    summary="Start a run",
    response_model=Started,
    status_code=201,
    responses={
        200: {"model": Started, "description": "the key started this run before"},
        **_refusals(401, 403, 404, 422, 429, s404="no such flow here"),
    },
    openapi_extra=_body_schema(StartRequest),
)
async def start(request: Request, credentials: Credentials, actor_id: ActorHeader = None) -> Any:
    """Start a run of a flow as the caller, who holds one of its operator or starter roles.

    201 with the new run; 200 with the run the same ``idempotency_key`` started before (a key
    another starter used is refused)."""
    body = await _parsed(request, StartRequest)
    if isinstance(body, JSONResponse):
        return body
    assert isinstance(body, StartRequest)
    credential = credentials.credentials if credentials else ""
    return await run_in_threadpool(_start, request, body, actor_id, credential)


def _start(request: Request, body: StartRequest, actor_id: str | None, credential: str) -> Any:
    actor = _who(request, actor_id, credential)
    if isinstance(actor, JSONResponse):
        return actor
    try:
        run_id, created = start_run(
            body.flow,
            body.input,
            body.idempotency_key,
            actor=actor.id,
            credential=credential,
            actor_type="human" if actor.kind == "human" else "service",
        )
    except StartRefusedError as refusal:
        web_state(request).limiter.refused(client_of(request), actor.id)
        status = 401 if refusal.fields.get("outcome") == "unauthenticated" else 403
        return _refused(status, str(refusal))
    except UnknownFlowError:
        return _refused(404, f"no flow {body.flow!r} here")
    except InvalidInputError as exc:
        return _refused(422, str(exc))
    started = Started(run_id=run_id, flow=body.flow, created=created, state=get_run(run_id).state)
    return JSONResponse(started.model_dump(mode="json"), status_code=201 if created else 200)


@router.api_route(
    "/runs", methods=["DELETE", "HEAD", "OPTIONS", "PATCH", "PUT", "TRACE"], include_in_schema=False
)
def runs_other_methods() -> JSONResponse:
    """405 naming both methods of /v1/runs: Starlette's own names only the first route's."""
    return JSONResponse(
        {"detail": "Method Not Allowed"}, status_code=405, headers={"Allow": "GET, POST"}
    )


@router.get("/runs", summary="List runs", response_model=RunPage, responses=_refusals(401, 429))
def list_runs(
    actor: Caller,
    state: Annotated[RunState | None, Query(description="only runs in this state")] = None,
    flow: Annotated[str | None, Query(description="only runs of this flow")] = None,
    started_by: Annotated[str | None, Query(description="only runs this actor started")] = None,
    older_than: Annotated[
        float | None,
        Query(
            ge=0,
            le=LONGEST_SECONDS,
            allow_inf_nan=False,
            description="only runs started more than this many seconds ago",
        ),
    ] = None,
    cursor: Annotated[str | None, Query(description="the next_cursor of the page before")] = None,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 50,
) -> RunPage:
    """Runs the caller reads (its operator or viewer roles of their flow), newest first."""
    given = Filters(state.value if state else None, flow, started_by, older_than)
    try:
        return runs_page(actor, given, cursor=cursor, limit=limit)
    except InvalidInputError as exc:
        # What FastAPI's checks cannot see (a cursor this listing never made, text no database
        # holds) is refused in the same shape as what they can, naming the parameter.
        said = str(exc)
        name = next((n for n in ("flow", "started_by") if said.startswith(n)), "cursor")
        problem = {"type": "value_error", "loc": ("query", name), "msg": said}
        raise RequestValidationError([{**problem, "input": locals().get(name)}]) from None


Action = Callable[..., str]


async def _operate(
    request: Request,
    run_ref: str,
    action: str,
    credentials: HTTPAuthorizationCredentials | None,
    actor_id: str | None,
    body_model: type[BaseModel],
) -> Any:
    body = await _parsed(request, body_model)
    if isinstance(body, JSONResponse):
        return body
    credential = credentials.credentials if credentials else ""
    return await run_in_threadpool(_act, request, run_ref, action, actor_id, credential, body)


def _act(
    request: Request,
    run_ref: str,
    action: str,
    actor_id: str | None,
    credential: str,
    body: BaseModel,
) -> Any:
    actor = _who(request, actor_id, credential)
    if isinstance(actor, JSONResponse):
        if actor.status_code == 401:
            reason = authority.UNAUTHENTICATED
            record(action, run_ref, actor_id, "human", OperatorUnauthenticatedError, reason)
        return actor
    limiter, client = web_state(request).limiter, client_of(request)
    verb, options = _verb(action, body)
    who = {"actor": actor.id, "actor_type": actor.kind, "credential": credential}
    try:
        try:
            run, _ = readable(actor, run_ref)
        except RunNotFoundError:
            # Not there, or not the caller's to read: the same answer. A run that exists is
            # told of the refused action all the same, as the verb would have recorded it.
            record_unreadable(action, run_ref, actor)
            raise
        done = verb(run.id, **who, **options)
    except RunNotFoundError:
        limiter.refused(client, actor.id)
        return _refused(404, str(RunNotFoundError(run_id=run_ref)))
    except OperatorUnauthenticatedError as exc:
        limiter.refused(client, actor.id)
        return _refused(401, str(exc))
    except OperatorDeniedError as exc:
        limiter.refused(client, actor.id)
        return _refused(403, str(exc))
    except (InvalidTransitionError, StaleStateError) as exc:
        return _refused(409, str(exc))
    except InvalidInputError as exc:
        return _refused(422, str(exc))
    except ConfigurationError as exc:
        return _refused(503, str(exc))
    if action == "fork":
        assert isinstance(body, ForkRequest)
        # fork_run returns the new run's id; the actor is recorded as kind:id.
        by = f"{actor.kind}:{actor.id}"
        forked = Forked(run_id=done, forked_from=run.id, from_step=body.from_step, by=by)
        return JSONResponse(forked.model_dump(mode="json"), status_code=201)
    acted = Acted(run_id=run.id, state=get_run(run.id).state, by=done)
    return JSONResponse(acted.model_dump(mode="json"))


def _verb(action: str, body: BaseModel) -> tuple[Action, dict[str, Any]]:
    if isinstance(body, ForkRequest):
        options = {
            "from_step": body.from_step,
            "input": body.input,
            "repeat_effects": body.repeat_effects,
        }
        return fork_run, options
    if isinstance(body, ReasonRequest):
        return (cancel_run if action == "cancel" else retry_run), {"reason": body.reason}
    return pause_run, {}


def record_unreadable(action: str, run_ref: str, actor: ActorView) -> None:
    """A refused action on a run the actor may not read (none of its flow's operator roles)."""
    reason = f"actor {actor.id} holds none of the operator roles of the run's flow"
    record(action, run_ref, actor.id, actor.kind, OperatorDeniedError, reason)


def record(
    action: str,
    run_ref: str,
    actor_id: str | None,
    actor_type: str,
    refused: type[OperatorRefusedError],
    reason: str,
) -> None:
    """The refusal on the run an exact id names, as the CLI's verbs record theirs (nothing is
    recorded for a prefix: resolving it for a caller who may not read it would tell which ids
    exist)."""
    try:
        who = authority.claim(action, actor_id, actor_type)
    except InvalidInputError:
        return  # no actor to record: the CLI refuses it before asking anyone
    outcome = "unauthenticated" if refused is OperatorUnauthenticatedError else "denied"
    refusal = refused(action=action, run_id=run_ref.strip().lower(), outcome=outcome, reason=reason)
    authority.record_refusal(refusal, who)


_ACTION_REFUSALS = _refusals(401, 403, 404, 409, 422, 429)


@router.post(
    "/runs/{run_id}/cancel",
    operation_id="cancel_run",
    summary="Cancel a run",
    response_model=Acted,
    responses=_ACTION_REFUSALS,
    openapi_extra=_body_schema(ReasonRequest, required=False),
)
async def cancel(
    request: Request, run_id: str, credentials: Credentials, actor_id: ActorHeader = None
) -> Any:
    """Cancel a run (``cancel_run``): its pending interrupts close, a step in flight is fenced."""
    return await _operate(request, run_id, "cancel", credentials, actor_id, ReasonRequest)


@router.post(
    "/runs/{run_id}/pause",
    operation_id="pause_run",
    summary="Pause a run",
    response_model=Acted,
    responses=_ACTION_REFUSALS,
    openapi_extra=_body_schema(PauseRequest, required=False),
)
async def pause(
    request: Request, run_id: str, credentials: Credentials, actor_id: ActorHeader = None
) -> Any:
    """Ask a run to stop at its next step boundary with an ``operator`` interrupt."""
    return await _operate(request, run_id, "pause", credentials, actor_id, PauseRequest)


@router.post(
    "/runs/{run_id}/retry",
    operation_id="retry_run",
    summary="Retry a run",
    response_model=Acted,
    responses=_ACTION_REFUSALS,
    openapi_extra=_body_schema(ReasonRequest, required=False),
)
async def retry(
    request: Request, run_id: str, credentials: Credentials, actor_id: ActorHeader = None
) -> Any:
    """Continue a failed run from its last checkpoint: its failed step runs again."""
    return await _operate(request, run_id, "retry", credentials, actor_id, ReasonRequest)


@router.post(
    "/runs/{run_id}/fork",
    operation_id="fork_run",
    summary="Fork a run",
    response_model=Forked,
    status_code=201,
    responses=_ACTION_REFUSALS,
    openapi_extra=_body_schema(ForkRequest),
)
async def fork(
    request: Request, run_id: str, credentials: Credentials, actor_id: ActorHeader = None
) -> Any:
    """Start a new run from the checkpoint before a step; effects the origin applied from
    there on are not repeated unless ``repeat_effects``."""
    return await _operate(request, run_id, "fork", credentials, actor_id, ForkRequest)
