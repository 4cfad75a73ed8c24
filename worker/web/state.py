"""What the web server's routes share: settings, sessions, the limiter, templates, metrics."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.templating import Jinja2Templates

from models.settings import Settings
from worker.web.sessions import SessionStore
from worker.web.throttle import RefusalLimiter


@dataclass(frozen=True)
class WebState:
    settings: Settings
    sessions: SessionStore
    limiter: RefusalLimiter
    templates: Jinja2Templates
    # The prometheus registry served at /metrics.
    registry: Any


def web_state(request: Request) -> WebState:
    state: WebState = request.app.state.web
    return state
