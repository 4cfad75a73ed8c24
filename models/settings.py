"""Configuration: one settings object read from ``INTERLUDE_*`` environment variables."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import ValidationError
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.errors import ConfigurationError

# The embedded default keeps everything in the working directory: no server is needed.
DEFAULT_HOME = Path(".interlude")
DEFAULT_DATABASE_URL = f"sqlite:///{DEFAULT_HOME / 'interlude.db'}"
DEFAULT_BROKER_URL = "filesystem://"
DEFAULT_LEASE_SECONDS = 60.0
DEFAULT_MAX_CLAIMS = 5
DEFAULT_REDISPATCH_AFTER = 30.0
DEFAULT_SWEEP_BATCH = 200
DEFAULT_PAUSE_EXPIRES_IN = 7 * 24 * 3600.0
DEFAULT_WEB_HOST = "127.0.0.1"
# Metrics name flows and interrupt kinds: served to this machine only unless asked.
DEFAULT_METRICS_HOST = "127.0.0.1"
DEFAULT_WEB_PORT = 8000
# Refused resume and sign-in attempts allowed before 429 (``limits`` notation).
DEFAULT_WEB_CLIENT_LIMIT = "30/minute"
DEFAULT_WEB_ACTOR_LIMIT = "20/minute"
DEFAULT_WEB_SESSION_SECONDS = 8 * 3600
DEFAULT_SWEEP_INTERVAL = 5.0
DEFAULT_REAP_INTERVAL = 10.0
ENV_PREFIX = "INTERLUDE_"
# What a variable must hold, by the type of its field, for the one-line error.
_EXPECTED = {float: "a number, like 5 or 2.5", int: "a whole number, like 5"}
# An effect's fn is called only while the worker's lease has more than this left.
DEFAULT_EFFECT_MARGIN = 5.0
# An intent left by an owner that lost its lease is reconciled (or handed to an operator) only
# this long after that lease expired, so that a call it still had in flight has landed.
DEFAULT_EFFECT_GRACE = 15.0


class Settings(BaseSettings):
    """Everything configurable about interlude, with the embedded defaults."""

    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    broker_url: str = DEFAULT_BROKER_URL
    # Folder for the filesystem broker (the embedded default).
    broker_folder: Path = DEFAULT_HOME / "broker"
    flows: str = ""
    lease_seconds: float = DEFAULT_LEASE_SECONDS
    # A run whose lease expired this many times in a row is failed by the reaper.
    max_claims: int = DEFAULT_MAX_CLAIMS
    redispatch_after: float = DEFAULT_REDISPATCH_AFTER
    sweep_batch: int = DEFAULT_SWEEP_BATCH
    pause_expires_in: float = DEFAULT_PAUSE_EXPIRES_IN
    metrics_port: int = 0
    # Where `interlude metrics` and a worker with a metrics port listen (0.0.0.0: every interface).
    metrics_host: str = DEFAULT_METRICS_HOST
    # Worker and beat log lines: "text" (run, flow and step appended) or "json" (one object each).
    log_format: Literal["text", "json"] = "text"
    # Connections each process keeps open to the database; by default, enough for one step per
    # slot of the worker's pool (a threads pool of 50 gets 52), else a few.
    db_pool_size: int | None = None
    # ``interlude serve``: the JSON resume API and the web inbox.
    web_host: str = DEFAULT_WEB_HOST
    web_port: int = DEFAULT_WEB_PORT
    # Where people reach the inbox (links in notifications); the bound address when empty.
    web_base_url: str = ""
    web_client_limit: str = DEFAULT_WEB_CLIENT_LIMIT
    web_actor_limit: str = DEFAULT_WEB_ACTOR_LIMIT
    web_session_seconds: int = DEFAULT_WEB_SESSION_SECONDS
    # Mark the session cookie Secure: set it when the inbox is served over HTTPS.
    web_secure_cookie: bool = False
    # Where the notifier recipe (examples/inbox_webhook.py) posts inbox links; off when empty.
    notify_webhook_url: str = ""
    # Celery beat's schedule (beat_schedule.py): seconds between sweeps and reaper passes.
    sweep_interval: float = DEFAULT_SWEEP_INTERVAL
    reap_interval: float = DEFAULT_REAP_INTERVAL
    effect_margin: float = DEFAULT_EFFECT_MARGIN
    effect_grace: float = DEFAULT_EFFECT_GRACE
    # Celery task events (Flower's view of tasks): the worker's and the publishers' task-sent.
    # Off, as in Celery: four publishes per task that nobody reads unless something watches,
    # and Flower turns a worker's on itself while it watches (every five seconds).
    task_events: bool = False

    def flow_modules(self) -> list[str]:
        return [m.strip() for m in self.flows.split(",") if m.strip()]

    def inbox_url(self) -> str:
        """The inbox's base URL, without a trailing slash."""
        return (self.web_base_url or f"http://{self.web_host}:{self.web_port}").rstrip("/")


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    """The settings; a bad value is a ConfigurationError naming the variable and what it needs."""
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigurationError(detail=_first_problem(exc)) from None


def _first_problem(exc: ValidationError) -> str:
    problem = exc.errors()[0]
    field = str(problem["loc"][0]) if problem["loc"] else "?"
    variable = f"{ENV_PREFIX}{field.upper()}"
    info = Settings.model_fields.get(field)
    annotation = info.annotation if info is not None else None
    expected = _EXPECTED.get(annotation) if isinstance(annotation, type) else None
    wanted = f"expected {expected}" if expected else problem["msg"]
    return f"{variable}={problem.get('input')!r}: {wanted}"


def reset_settings() -> None:
    """Forget the cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()
