"""Configuration: one settings object read from ``INTERLUDE_*`` environment variables."""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

from annotated_types import Ge, Gt, Le
from pydantic import Field, ValidationError, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

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
# An inbox session with no request for this long ends (OWASP's guidance: 15 to 30 minutes).
DEFAULT_WEB_IDLE_SECONDS = 30 * 60
# A request head (request line and headers) must arrive within this many seconds.
DEFAULT_WEB_HEAD_SECONDS = 10.0
DEFAULT_SWEEP_INTERVAL = 5.0
DEFAULT_REAP_INTERVAL = 10.0
ENV_PREFIX = "INTERLUDE_"
# What a variable must hold, by the type of its field, for the one-line error.
_EXPECTED = {float: "a number", int: "a whole number"}
_EXAMPLE = {float: "like 5 or 2.5", int: "like 5"}
# An effect's fn is called only while the worker's lease has more than this left.
DEFAULT_EFFECT_MARGIN = 5.0
# An intent left by an owner that lost its lease is reconciled (or handed to an operator) only
# this long after that lease expired, so that a call it still had in flight has landed.
DEFAULT_EFFECT_GRACE = 15.0

# Flow notifiers (worker.ops.notifications): each call has this long (Celery's soft time limit,
# where the pool enforces one), a failed call is tried again this many times, the first time after
# this many seconds and twice as long each time after.
DEFAULT_NOTIFY_TIMEOUT_SECONDS = 30.0
DEFAULT_NOTIFY_RETRIES = 5
DEFAULT_NOTIFY_BACKOFF = 2.0
# A notify task (its call, and its hard limit 10 s after) must end well within RabbitMQ's
# default consumer_timeout (1800 s), after which the broker closes the channel of a worker still
# holding the message; a retry's countdown (the message is held unacknowledged meanwhile) too.
LONGEST_NOTIFY_SECONDS = 1500.0
LONGEST_NOTIFY_BACKOFF = 600.0
MOST_NOTIFY_RETRIES = 100
# After a notify task's soft time limit, its call has this long to end before the pool child is
# killed (the hard limit: a call deaf to the soft limit, stuck in C code, a handler that
# swallows it).
NOTIFY_HARD_LIMIT_GRACE = 10.0
# An owed notification whose task has not ended this long after its call's time limit is taken
# for lost (a killed worker, a broker that lost it, a refused publish) and published again.
DEFAULT_NOTIFY_OVERDUE_AFTER = 60.0

# The longest any duration may be (100 years): a deadline that far ahead, or a cutoff four
# times that far back (the reaper's longest wait), still fits a datetime and a timedelta.
LONGEST_SECONDS = 100 * 365 * 24 * 3600
# Beat publishes a sweep and a reaper pass every interval: shorter floods the broker.
SHORTEST_BEAT_INTERVAL = 0.1
MAX_PORT = 65535
# Far above any real use; a bound keeps a typo out of SQL LIMITs and connection pools.
LARGEST_COUNT = 1_000_000
LARGEST_POOL_SIZE = 10_000
# Every float setting is finite: nan and inf pass no comparison and overflow a timedelta.
Seconds = Annotated[float, Field(gt=0, le=LONGEST_SECONDS, allow_inf_nan=False)]
SecondsOrZero = Annotated[float, Field(ge=0, le=LONGEST_SECONDS, allow_inf_nan=False)]
BeatInterval = Annotated[
    float, Field(ge=SHORTEST_BEAT_INTERVAL, le=LONGEST_SECONDS, allow_inf_nan=False)
]
# Backends dialect_for knows (``postgres`` is PostgreSQL's other scheme); checked here, without
# SQLAlchemy, so that every entry point refuses another before it connects to anything.
SUPPORTED_DATABASES = ("postgresql", "postgres", "sqlite")
# SQLAlchemy's URL grammar starts ``name[+driver]://``.
_URL_SCHEME = re.compile(r"([\w+]+)://")
# Brokers checked without importing kombu; any other scheme must be one of kombu's transports.
COMMON_BROKERS = frozenset({"redis", "rediss", "amqp", "amqps", "pyamqp", "filesystem", "memory"})
# Never echoed in an error: they may hold a password.
_SECRET_FIELDS = frozenset(
    {
        "database_url",
        "broker_url",
        "broker_transport_options",
        "notify_webhook_url",
        "link_secret",
        "smtp_password",
        "slack_signing_secret",
        "slack_bot_token",
    }
)
# An answer link lives this long at most (and never past its interrupt's deadline).
DEFAULT_LINK_SECONDS = 24 * 3600
# The shortest secret answer links are signed with: 32 bytes, as token_urlsafe(32) gives.
SHORTEST_LINK_SECRET = 32
DEFAULT_SMTP_PORT = 587


class Settings(BaseSettings):
    """Everything configurable about interlude, with the embedded defaults."""

    # Each field's docstring is its entry in the generated reference
    # (docs/reference/configuration.md). Read from the source by docs/gen_reference.py, not by
    # pydantic's use_attribute_docstrings, which would parse this file at every import.
    model_config = SettingsConfigDict(env_prefix=ENV_PREFIX, extra="ignore")

    database_url: str = DEFAULT_DATABASE_URL
    """SQLAlchemy URL of the database: `postgresql://…` or `postgres://…` (psycopg 3), or
    `sqlite:///file.db`. The default is the embedded SQLite file in `.interlude/` of the folder
    the process runs in; left unset, every command (but `demo`) and worker says so on one line
    with that file's full path."""
    tracing: bool = False
    """OpenTelemetry spans for steps and answers (the `tracing` extra; worker.ops.tracing): one run
    is one trace, across its waits."""
    broker_url: str = DEFAULT_BROKER_URL
    """Celery broker: Redis (`redis://host:6379/0`) or RabbitMQ (`amqp://user:password@host//`)
    in production; the default is kombu's filesystem broker (no server)."""
    broker_transport_options: dict[str, Any] = Field(default_factory=dict)
    """Celery's broker transport options, a JSON object, over interlude's own
    (worker.engine.broker_options; for Redis: no acknowledgement emulation, 5 s socket
    timeouts); e.g. `{"master_name": "mymaster"}` for a `sentinel://` URL. Never printed in
    errors."""
    broker_folder: Path = DEFAULT_HOME / "broker"
    """Folder of the filesystem broker (the embedded default)."""
    flows: str = ""
    """Comma-separated modules that define flows: imported by a worker and `interlude serve`
    when they start (a module that cannot be imported stops them), and by the command and
    application code when they need a flow. The worker that takes `interlude.maintenance` and
    `interlude sweep` need them too (without a flow's modules its `default` expiry policy waits
    and its notifiers are not published), and so does a worker that takes `interlude.notify`."""
    lease_seconds: Seconds = DEFAULT_LEASE_SECONDS
    """A worker's lease on a run while it executes a step, in seconds (per step:
    `@flow.step(lease_seconds=…)`)."""
    max_claims: int = Field(DEFAULT_MAX_CLAIMS, ge=0, le=LARGEST_COUNT)
    """A run whose lease expires more than this many times in a row is failed by the reaper
    (0: at the first)."""
    redispatch_after: Seconds = DEFAULT_REDISPATCH_AFTER
    """Seconds after which an unclaimed `queued` or `resuming` run is published again; later
    republishes wait twice as long each time, up to four times this."""
    sweep_batch: int = Field(DEFAULT_SWEEP_BATCH, ge=1, le=LARGEST_COUNT)
    """Rows per sweep or reaper transaction."""
    pause_expires_in: Seconds = DEFAULT_PAUSE_EXPIRES_IN
    """Deadline of an operator pause, in seconds (7 days)."""
    metrics_port: int = Field(0, ge=0, le=MAX_PORT)
    """When set, a worker serves its own step metrics (Prometheus) on this port; 0 is off. The
    figures of the whole database come from `interlude metrics`."""
    metrics_host: str = DEFAULT_METRICS_HOST
    """Where `interlude metrics` (unless `--host`) and a worker's metrics port listen;
    `0.0.0.0` for every interface (in a container)."""
    log_format: Literal["text", "json"] = "text"
    """Worker and beat log lines: `text` names the run, flow and step at the end of every line
    about a run; `json` writes one JSON object per line (`run_id`, `flow`, `step`, `action`, …)."""
    db_pool_size: int | None = Field(None, ge=1, le=LARGEST_POOL_SIZE)
    """Database connections each process keeps open. By default, enough for one step per slot
    of the worker's pool (a threads pool of 50 gets 52); other processes 5."""
    web_host: str = DEFAULT_WEB_HOST
    """Where `interlude serve` (the JSON resume API and the web inbox) listens."""
    web_port: int = Field(DEFAULT_WEB_PORT, ge=1, le=MAX_PORT)
    """The port `interlude serve` listens on."""
    web_base_url: str = ""
    """Where people reach the inbox (links in notifications); `http://HOST:PORT` of
    `interlude serve` when empty."""
    web_client_limit: str = DEFAULT_WEB_CLIENT_LIMIT
    """Refused attempts (resumes not accepted, failed sign-ins) allowed per client address
    before the web server answers 429."""
    web_actor_limit: str = DEFAULT_WEB_ACTOR_LIMIT
    """Refused attempts allowed per actor before the web server answers 429."""
    web_session_seconds: int = Field(DEFAULT_WEB_SESSION_SECONDS, ge=1, le=LONGEST_SECONDS)
    """How long an inbox session lasts after sign-in, in seconds."""
    web_idle_seconds: int = Field(DEFAULT_WEB_IDLE_SECONDS, ge=1, le=LONGEST_SECONDS)
    """An inbox session with no request for this long ends sooner, in seconds."""
    web_head_seconds: Seconds = DEFAULT_WEB_HEAD_SECONDS
    """A connection whose request line and headers have not all arrived this many seconds
    after it opened (or after the response before it) is closed: a client trickling headers
    holds no socket for long."""
    web_secure_cookie: bool = False
    """Mark the session cookie `Secure`: set it when the inbox is served over HTTPS."""
    notify_webhook_url: str = ""
    """Where the notifier recipe (`examples/inbox_webhook.py`) posts inbox links; off when
    empty."""
    notify_timeout_seconds: float = Field(
        DEFAULT_NOTIFY_TIMEOUT_SECONDS, gt=0, le=LONGEST_NOTIFY_SECONDS, allow_inf_nan=False
    )
    """How long one notifier call may take, in seconds: Celery's soft time limit of the
    `interlude.notify` task (the pool child is killed 10 s later). A prefork worker enforces
    it, gevent only the later limit, the threads, solo and eventlet pools none."""
    notify_retries: int = Field(DEFAULT_NOTIFY_RETRIES, ge=0, le=MOST_NOTIFY_RETRIES)
    """How many times a failing notifier call is tried again before one warning line says it
    failed."""
    notify_backoff: float = Field(
        DEFAULT_NOTIFY_BACKOFF, ge=0, le=LONGEST_NOTIFY_BACKOFF, allow_inf_nan=False
    )
    """Seconds before a failed notifier's first retry; twice as long each time after, at most
    600."""
    notify_overdue_after: Seconds = DEFAULT_NOTIFY_OVERDUE_AFTER
    """Seconds a notify task may take past its call's time limit (waiting in the queue
    included) before the reaper takes it for lost (a killed worker, a lost message, a refused
    publish) and publishes it again, as the next attempt."""
    sweep_interval: BeatInterval = DEFAULT_SWEEP_INTERVAL
    """Seconds between expiry sweeps (Celery beat, `beat_schedule.py`)."""
    reap_interval: BeatInterval = DEFAULT_REAP_INTERVAL
    """Seconds between reaper passes (Celery beat, `beat_schedule.py`)."""
    effect_margin: SecondsOrZero = DEFAULT_EFFECT_MARGIN
    """An effect's `fn` is called only while the worker's lease has more than this many seconds
    left (at most half the step's lease); 0: until the lease's last moment."""
    effect_grace: SecondsOrZero = DEFAULT_EFFECT_GRACE
    """Seconds after an old owner's lease expired before its unsettled effect is reconciled or
    handed to an operator: set it above the time your slowest effect call takes to land."""
    task_events: bool = False
    """Celery task events (sent, received, started, succeeded: four publishes per task), which
    Flower shows tasks from. Off, as in Celery: Flower turns a running worker's on itself while
    it watches. `true` turns on the worker's and the publishers' task-sent events, for a monitor
    that does not turn them on itself."""
    link_secret: str = ""
    """The key answer links' tokens are signed with (`worker.gateway.answer_links`): 32 characters
    or more. Changing it ends every link issued. Links cannot be issued while it is empty."""
    link_seconds: int = Field(DEFAULT_LINK_SECONDS, ge=1, le=LONGEST_SECONDS)
    """How long an answer link lives at most (never past its interrupt's deadline)."""
    smtp_host: str = ""
    """The e-mail notifier's SMTP server (`worker.ops.notify_email`); off while empty."""
    smtp_port: int = Field(DEFAULT_SMTP_PORT, ge=1, le=MAX_PORT)
    """The SMTP server's port."""
    smtp_security: Literal["starttls", "ssl", "none"] = "starttls"
    """`starttls` upgrades a plain connection, `ssl` connects with TLS, `none` sends in the
    clear (a relay on this machine)."""
    smtp_user: str = ""
    """The SMTP login, if the server asks for one."""
    smtp_password: str = ""
    """The SMTP password (never echoed in an error)."""
    smtp_from: str = ""
    """The sender of the e-mail notifier's messages (`interlude@<smtp host>` when empty)."""
    slack_signing_secret: str = ""
    """The Slack app's signing secret: `POST /v1/slack/actions` refuses every callback without
    it, and any whose signature it does not verify."""
    slack_bot_token: str = ""
    """The Slack app's bot token, which the Slack notifier posts with."""
    slack_channel: str = ""
    """The channel the Slack notifier posts to; off while it or the bot token is empty."""

    @field_validator("link_secret")
    @classmethod
    def _a_long_secret(cls, secret: str) -> str:
        if secret and len(secret) < SHORTEST_LINK_SECRET:
            raise ValueError(
                f"at least {SHORTEST_LINK_SECRET} characters; make one with "
                "python -c 'import secrets; print(secrets.token_urlsafe(32))'"
            )
        return secret

    @field_validator("database_url")
    @classmethod
    def _a_supported_database(cls, url: str) -> str:
        backend = _scheme(url, "postgresql://user@host/db or sqlite:///file.db")
        if backend not in SUPPORTED_DATABASES:
            raise ValueError(f"unsupported database {backend!r}: use postgresql:// or sqlite://")
        _readable_database_url(url)
        return url

    @field_validator("broker_url")
    @classmethod
    def _a_known_broker(cls, url: str) -> str:
        # Else a run is committed and its every publish fails, until someone reads the log.
        transport = _scheme(url, "redis://host:6379/0 or amqp://host//")
        if transport not in COMMON_BROKERS and transport not in _kombu_transports():
            raise ValueError(
                f"unknown broker {transport!r}: use redis://, amqp:// or filesystem://"
            )
        return url

    def database_url_is_default(self) -> bool:
        """Whether INTERLUDE_DATABASE_URL was left unset (the embedded SQLite database)."""
        return "database_url" not in self.model_fields_set

    def embedded_notice(self) -> str | None:
        """One line saying that the embedded default database is in use, and where (it is
        relative to the folder the process runs in); None when INTERLUDE_DATABASE_URL is set."""
        if not self.database_url_is_default():
            return None
        path = (DEFAULT_HOME / "interlude.db").resolve()
        return f"INTERLUDE_DATABASE_URL is not set: using the embedded SQLite database at {path}"

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
    except SettingsError as exc:
        # A field read as JSON (the transport options) whose value is not JSON; the value
        # itself is not echoed (it may hold a password).
        found = re.search(r'field "(\w+)"', str(exc))
        name = f"{ENV_PREFIX}{found.group(1).upper()}" if found else "a setting"
        raise ConfigurationError(detail=f"{name}: not JSON; give a JSON object") from None


def _first_problem(exc: ValidationError) -> str:
    problem = exc.errors()[0]
    field = str(problem["loc"][0]) if problem["loc"] else "?"
    variable = f"{ENV_PREFIX}{field.upper()}"
    if field not in _SECRET_FIELDS:
        variable = f"{variable}={problem.get('input')!r}"
    info = Settings.model_fields.get(field)
    expected = _expected(info) if info is not None else None
    if problem["type"] == "value_error":  # one of our validators: its message says it all
        wanted = str(problem.get("ctx", {}).get("error", problem["msg"]))
    else:
        wanted = f"expected {expected}" if expected else problem["msg"]
    return f"{variable}: {wanted}"


def _expected(info: FieldInfo) -> str | None:
    """What a numeric field holds, with its range: "a whole number at least 1 and at most 9"."""
    kinds = get_args(info.annotation) or (info.annotation,)  # ``int | None``: int
    kind = next((k for k in kinds if k in _EXPECTED), None)
    if kind is None:
        return None
    lower = [f"at least {_shown(m.ge)}" for m in info.metadata if isinstance(m, Ge)]
    lower += [f"above {_shown(m.gt)}" for m in info.metadata if isinstance(m, Gt)]
    upper = [f"at most {_shown(m.le)}" for m in info.metadata if isinstance(m, Le)]
    bounds = f" {' and '.join(lower + upper)}" if lower or upper else ""
    return f"{_EXPECTED[kind]}{bounds}, {_EXAMPLE[kind]}"


def _shown(bound: Any) -> str:
    return f"{bound:g}" if isinstance(bound, float) and not bound.is_integer() else str(int(bound))


def reset_settings() -> None:
    """Forget the cached settings (tests change the environment between cases)."""
    get_settings.cache_clear()


def _kombu_transports() -> frozenset[str]:
    # Imported only for a rarer broker (SQS, a sentinel, ...): the CLI's settings stay light.
    from kombu.transport import TRANSPORT_ALIASES

    return frozenset(TRANSPORT_ALIASES)


def _readable_database_url(url: str) -> None:
    """ValueError unless SQLAlchemy reads ``url`` and its port is one (else every command and
    the web server's health check failed with a traceback of SQLAlchemy's, at first use)."""
    # Imported here: only a command that uses the database pays for SQLAlchemy's import.
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        port = make_url(url).port
    except (ArgumentError, ValueError):
        # SQLAlchemy's own message quotes the URL, password included: it is not passed on.
        raise ValueError(
            "not a URL SQLAlchemy can read (check the host, the port and that a password's "
            "special characters are %-escaped)"
        ) from None
    if port is not None and not 0 < port <= MAX_PORT:
        raise ValueError(f"the port must be 1 to {MAX_PORT}, got {port}")


def _scheme(url: str, example: str) -> str:
    """The backend a URL names (``postgresql`` of ``postgresql+psycopg://``), or ValueError."""
    found = _URL_SCHEME.match(url)
    if found is None:
        raise ValueError(f"expected a URL like {example}")
    return found.group(1).split("+")[0]


def notify_due_in(settings: Settings, countdown: float = 0.0) -> float:
    """Seconds from a notify task's publish (due after ``countdown``) until it is overdue: its
    call's time limits, then ``notify_overdue_after``."""
    return (
        countdown
        + settings.notify_timeout_seconds
        + NOTIFY_HARD_LIMIT_GRACE
        + settings.notify_overdue_after
    )
