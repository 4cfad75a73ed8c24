"""The web server's application: the JSON resume API, the inbox, health and metrics."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

import jinja2
from fastapi import FastAPI, Request
from fastapi.responses import (
    FileResponse,
    JSONResponse,
    PlainTextResponse,
    RedirectResponse,
    Response,
)
from pydantic import BaseModel
from starlette.templating import Jinja2Templates

from models.errors import InterludeError, InterruptNotFoundError, RunNotFoundError
from models.inbox_queries import database_ok
from models.settings import Settings, get_settings
from worker.flows.flow import load_flow_modules
from worker.present.formats import age, timestamp, until
from worker.web import api, bulk, console, inbox, links, runs_api, slack
from worker.web.cards import flows_of, summary
from worker.web.openapi import document
from worker.web.sessions import SessionStore, backend_for
from worker.web.state import WebState
from worker.web.throttle import RefusalLimiter

HERE = Path(__file__).parent
log = logging.getLogger(__name__)
INTERNAL_ERROR = "the server failed to answer this request (logged as web_error)"
# The inbox runs no script and loads nothing from elsewhere; forms post only to itself.
INBOX_CSP = (
    "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
# The API's answers are data, never a page: nothing in one may load, run or be framed.
API_CSP = "default-src 'none'; frame-ancestors 'none'; base-uri 'none'"
# /docs is FastAPI's Swagger page, whose scripts and styles come from a CDN: it is not framed.
DOCS_CSP = "frame-ancestors 'none'"


class Health(BaseModel):
    status: Literal["ok", "unavailable"]
    database: Literal["ok", "unreachable"]


def same_site(location: str) -> str:
    """A redirect's target as a path on this server, whatever host the request named.

    Starlette builds the target of a redirect to the path with (or without) its slash from
    the request's Host header, which the client chose: ``/inbox/`` sent with ``Host:
    evil.example`` would send the visitor there. interlude redirects only within itself.
    """
    parts = urlsplit(location)
    # One leading slash: "//evil.example/x" would be read as another host again.
    path = "/" + parts.path.lstrip("/")
    return f"{path}?{parts.query}" if parts.query else path


def _templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
    )
    env.globals.update(age=age, until=until, stamp=timestamp, flows_of=flows_of, summary=summary)
    return Jinja2Templates(env=env)


def _metrics() -> tuple[object, object]:
    from prometheus_client import CollectorRegistry, Counter

    registry = CollectorRegistry()
    counter = Counter(
        "interlude_web_throttled",
        "Requests answered 429 because a client or actor used up its refused attempts",
        ["scope"],
        registry=registry,
    )
    return registry, counter


def create_app(settings: Settings | None = None) -> FastAPI:
    """The ASGI application ``interlude serve`` runs."""
    settings = settings or get_settings()
    # The gateway validates answers against input schemas the flows register.
    load_flow_modules()
    app = FastAPI(
        title="interlude",
        summary="Answer interrupts of interlude runs: the resume API and the review inbox.",
        version="1",
        docs_url="/docs",
        redoc_url=None,
    )
    registry, counter = _metrics()
    limiter = RefusalLimiter(
        settings.broker_url, settings.web_client_limit, settings.web_actor_limit
    )
    limiter.counter = counter
    app.state.web = WebState(
        settings=settings,
        sessions=SessionStore(
            backend_for(settings.broker_url),
            settings.web_session_seconds,
            idle=settings.web_idle_seconds,
        ),
        limiter=limiter,
        templates=_templates(),
        registry=registry,
    )
    app.include_router(api.router)
    app.include_router(runs_api.router)
    app.include_router(inbox.router)
    app.include_router(console.router)
    # Answer links, bulk review and chat callbacks (each answers through the gateway).
    app.include_router(links.router)
    app.include_router(bulk.router)
    app.include_router(slack.router)
    links.install_redaction()
    _add_basics(app)
    app.openapi = lambda: document(app)  # type: ignore[method-assign]
    return app


def _add_basics(app: FastAPI) -> None:
    @app.middleware("http")
    async def security_headers(
        request: Request, call_next: Callable[[Request], Awaitable[Response]]
    ) -> Response:
        try:
            response = await call_next(request)
        except Exception:
            # Answered here, not by Starlette's outermost handler: this answer too carries the
            # headers below. What failed is logged, not shown.
            log.exception("request failed", extra={"action": "web_error", "path": request.url.path})
            response = JSONResponse({"detail": INTERNAL_ERROR}, status_code=500)
        location = response.headers.get("location")
        if location is not None:
            response.headers["location"] = same_site(location)
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("Referrer-Policy", "no-referrer")
        path = request.url.path
        if path.startswith(("/inbox", "/console")):
            policy = INBOX_CSP
        elif path == "/docs":
            policy = DOCS_CSP
        else:
            policy = API_CSP
        response.headers["Content-Security-Policy"] = policy
        response.headers["X-Frame-Options"] = "DENY"
        if not path.startswith(("/inbox/static", "/console/static")):
            response.headers.setdefault("Cache-Control", "no-store")
        return response

    @app.exception_handler(InterruptNotFoundError)
    @app.exception_handler(RunNotFoundError)
    async def not_found(_request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=404)

    @app.exception_handler(InterludeError)
    async def refused(_request: Request, exc: Exception) -> Response:
        return JSONResponse({"detail": str(exc)}, status_code=422)

    @app.get("/", include_in_schema=False)
    def root() -> Response:
        return RedirectResponse("/inbox", status_code=303)

    @app.get(
        "/healthz",
        operation_id="health",
        tags=["operations"],
        response_model=Health,
        responses={503: {"model": Health, "description": "the database does not answer"}},
    )
    def healthz() -> JSONResponse:
        """200 when the database answers, else 503."""
        ok = database_ok()
        return JSONResponse(
            {"status": "ok" if ok else "unavailable", "database": "ok" if ok else "unreachable"},
            status_code=200 if ok else 503,
        )

    @app.get(
        "/metrics",
        operation_id="metrics",
        tags=["operations"],
        response_class=PlainTextResponse,
        responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
    )
    def metrics(request: Request) -> Response:
        """Prometheus metrics of this process (throttled requests), in Prometheus's text format."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        body = generate_latest(request.app.state.web.registry)
        return Response(body, media_type=CONTENT_TYPE_LATEST)

    @app.get("/inbox/static/inbox.css", include_in_schema=False)
    def stylesheet() -> Response:
        return FileResponse(HERE / "static" / "inbox.css", media_type="text/css")
