"""The operators' console, beside the inbox: runs, one run's history, and operator actions.

Server-rendered like the inbox, with its sessions and CSRF tokens and no script. What an actor
sees is scoped as the API's reads are (``run_listing``, ``visibility``): a run it may not read
is not found. Actions (cancel, pause, retry, fork from a step) are offered to holders of the
flow's operator roles, each behind a confirmation page, and performed by the CLI's verbs with
the signed-in actor's credential: authorized and recorded there, refusals included.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import FileResponse, RedirectResponse, Response
from starlette.datastructures import FormData

from models import queries
from models.contracts import CheckpointView, EffectView, EventView, RunView
from models.db import transaction
from models.enums import RunState
from models.errors import (
    ConfigurationError,
    InterludeError,
    InvalidInputError,
    InvalidTransitionError,
    OperatorDeniedError,
    OperatorUnauthenticatedError,
    RunNotFoundError,
    StaleStateError,
)
from worker.forks import fork_run
from worker.interrupts import attempts_in_view, count_resume_attempts
from worker.operate import retry_run
from worker.ops.step_history import StepView, steps_of
from worker.present.timeline import timeline
from worker.runs import cancel_run, get_run, pause_run
from worker.web.auth import client_of
from worker.web.pages import (
    Visitor,
    message_page,
    pretty,
    render,
    signed_in_form,
    to_signin,
    visitor_of,
)
from worker.web.run_listing import (
    Filters,
    flow_scope,
    listing,
    may_operate,
    readable,
)
from worker.web.runs_api import record_unreadable
from worker.web.state import web_state

router = APIRouter(prefix="/console", include_in_schema=False)
STYLESHEET = Path(__file__).parent / "static" / "console.css"
PAGE = 50
# The age filter's choices: label and seconds.
AGES = [("", "any age"), ("300", "5 minutes"), ("3600", "1 hour"), ("86400", "1 day")]
AGES += [("604800", "7 days"), ("2592000", "30 days")]
ACTIONS = {
    "cancel": "Cancel",
    "pause": "Pause",
    "retry": "Retry",
    "fork": "Fork",
}
# What each action does, said on its confirmation page.
EXPLAINED = {
    "cancel": "The run is cancelled: its pending interrupts close and a step in flight is "
    "fenced. A cancelled run does not continue; fork it to run its work again.",
    "pause": "The run stops at its next step boundary with an operator interrupt, which an "
    "operator answers to let it continue.",
    "retry": "The failed run continues from its last checkpoint: its failed step runs again.",
    "fork": "A new run starts from the checkpoint before this step, linked to this one. "
    "Effects this run applied from there on are not repeated unless you ask for it.",
}


@router.get("/static/console.css")
def stylesheet() -> Response:
    return FileResponse(STYLESHEET, media_type="text/css")


@router.get("")
def home() -> Response:
    return RedirectResponse("/console/runs", status_code=303)


def _filters(
    state: str | None, flow: str | None, started_by: str | None, older: str | None
) -> Filters:
    # Ages come from the page's choices; anything else is no age filter.
    seconds = float(older) if older and older in dict(AGES) else None
    return Filters(state or None, flow or None, started_by or None, seconds)


@router.get("/runs")
def runs(
    request: Request,
    state: str | None = None,
    flow: str | None = None,
    started_by: str | None = None,
    older_than: str | None = None,
    cursor: str | None = None,
) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    given = _filters(state, flow, started_by, older_than)
    try:
        page, counts = listing(visitor.actor, given, cursor=cursor, limit=PAGE, counts=True)
    except InvalidInputError as exc:
        return message_page(request, "Runs", str(exc), 422, visitor)
    query = {
        "state": state or "",
        "flow": flow or "",
        "started_by": started_by or "",
        "older_than": older_than or "",
    }
    context = {
        "visitor": visitor,
        "page": page,
        "counts": [(s.value, counts.get(s.value, 0)) for s in RunState],
        "total": sum(counts.values()),
        "flows": [scope.name for scope in flow_scope(visitor.actor)],
        "states": [s.value for s in RunState],
        "ages": AGES,
        "query": query,
    }
    return render(request, "console_runs.html", context)


@router.get("/runs/{run_id}")
def run_page(request: Request, run_id: str) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    try:
        run, interrupts = readable(visitor.actor, run_id)
    except (RunNotFoundError, InvalidInputError) as exc:
        return _not_found(request, visitor, exc)
    steps, checkpoints, events, effects = _history(run.id)
    attempts = attempts_in_view(run.id)
    entries = timeline(checkpoints, events, effects, interrupts, attempts)
    context = {
        "visitor": visitor,
        "run": run,
        "interrupts": interrupts,
        "steps": steps,
        "effects": effects,
        "attempts": attempts,
        "attempt_counts": count_resume_attempts(run.id),
        "entries": entries,
        "operator": may_operate(visitor.actor, run),
        "actions": _offered(run),
        "pretty": pretty,
    }
    return render(request, "console_run.html", context)


def _history(
    run_id: str,
) -> tuple[list[StepView], list[CheckpointView], list[EventView], list[EffectView]]:
    """The run's steps, checkpoints, events and effects, read together (a page's worth of
    round trips saved over asking each reader on its own)."""
    with transaction(readonly=True) as session:
        checkpoints = queries.checkpoints_of(session, run_id)
        steps = steps_of(checkpoints)
        return (
            steps,
            [CheckpointView.model_validate(row, from_attributes=True) for row in checkpoints],
            [
                EventView.model_validate(row, from_attributes=True)
                for row in queries.events_of(session, run_id)
            ],
            [
                EffectView.model_validate(row, from_attributes=True)
                for row in queries.effects_of(session, run_id)
            ],
        )


def _offered(run: RunView) -> list[str]:
    """The actions the run's state allows (fork is offered per step)."""
    state = RunState(run.state)
    offered = []
    if not state.terminal:
        offered += ["pause", "cancel"] if state is not RunState.FAILED else ["cancel"]
    if state is RunState.FAILED:
        offered.append("retry")
    return offered


@router.get("/runs/{run_id}/{action}")
def confirm(request: Request, run_id: str, action: str, step: str | None = None) -> Response:
    visitor = visitor_of(request)
    if visitor is None or visitor.actor is None:
        return to_signin()
    try:
        run, _ = readable(visitor.actor, run_id)
    except (RunNotFoundError, InvalidInputError) as exc:
        return _not_found(request, visitor, exc)
    if action not in ACTIONS or (action == "fork" and not step):
        return message_page(request, "Not found", f"no action {action!r} here", 404, visitor)
    if not may_operate(visitor.actor, run):
        return message_page(
            request,
            "Not yours to operate",
            f"You hold none of the operator roles of flow {run.flow_name}; "
            "only its operators cancel, pause, retry or fork its runs.",
            403,
            visitor,
        )
    context = {
        "visitor": visitor,
        "run": run,
        "action": action,
        "label": ACTIONS[action],
        "explained": EXPLAINED[action],
        "step": step,
        "pretty": pretty,
    }
    return render(request, "console_confirm.html", context)


@router.post("/runs/{run_id}/{action}")
async def act(request: Request, run_id: str, action: str) -> Response:
    checked = await signed_in_form(request)
    if isinstance(checked, Response):
        return checked
    visitor, form = checked
    return await run_in_threadpool(_perform, request, visitor, run_id, action, form)


def _perform(
    request: Request, visitor: Visitor, run_id: str, action: str, form: FormData
) -> Response:
    actor = visitor.actor
    if actor is None:  # (revoked since the page was shown)
        return to_signin()
    limiter, client = web_state(request).limiter, client_of(request)
    if action not in ACTIONS:
        return message_page(request, "Not found", f"no action {action!r} here", 404, visitor)
    who = {"actor": actor.id, "actor_type": actor.kind, "credential": visitor.credential}
    fields = {k: v for k, v in form.multi_items() if isinstance(v, str)}
    try:
        try:
            run, _ = readable(actor, run_id)
        except RunNotFoundError:
            record_unreadable(action, run_id, actor)
            raise
        done = _verb(action, run.id, who, fields)
    except (RunNotFoundError, OperatorUnauthenticatedError, OperatorDeniedError) as exc:
        limiter.refused(client, actor.id)
        if isinstance(exc, RunNotFoundError):
            return _not_found(request, visitor, exc)
        return message_page(request, "Refused", str(exc), 403, visitor)
    except (InvalidTransitionError, StaleStateError) as exc:
        return message_page(request, "Not now", str(exc), 409, visitor)
    except InvalidInputError as exc:
        return message_page(request, "Not accepted", str(exc), 422, visitor)
    except ConfigurationError as exc:
        return message_page(request, "Cannot act here", str(exc), 503, visitor)
    context: dict[str, Any] = {"visitor": visitor, "run": run, "action": action}
    if action == "fork":
        context["fork_id"] = done
        context["step"] = fields.get("step")
    else:
        context["by"] = done
        context["state"] = _state_of(run.id)
    return render(request, "console_done.html", context)


def _verb(action: str, run_id: str, who: dict[str, Any], fields: dict[str, str]) -> str:
    reason = fields.get("reason", "").strip()
    if action == "cancel":
        return cancel_run(run_id, reason=reason, **who)
    if action == "pause":
        return pause_run(run_id, **who)
    if action == "retry":
        return retry_run(run_id, reason=reason, **who)
    given = fields.get("input", "").strip()
    try:
        value = json.loads(given) if given else None
    except (ValueError, RecursionError):
        raise InvalidInputError(detail="the fork's input is not JSON") from None
    return fork_run(
        run_id,
        from_step=fields.get("step", ""),
        input=value,
        repeat_effects=fields.get("repeat_effects") == "true",
        **who,
    )


def _state_of(run_id: str) -> str:
    return get_run(run_id).state


def _not_found(request: Request, visitor: Visitor, missing: InterludeError) -> Response:
    """A run that is not there, or not the visitor's to read: the same page."""
    return message_page(request, "Not found", str(missing), 404, visitor)
