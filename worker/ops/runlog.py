"""Log lines about a run name the run, its flow and its step; ``INTERLUDE_LOG_FORMAT=json``.

The step runtime binds the run it is executing (``bind``); a filter on the process's handlers
adds ``run_id``, ``flow`` and ``step`` to every record from that context (or from the record's
own ``extra``), and appends them to the text of human-readable lines.

Text lines are escaped (``EscapeControls``): a control character in a message, in its
arguments or in an exception's message is written as an escape, so a value that reached a
log call cannot end the line and forge the next one; text shaped like a credential is
redacted (uvicorn's access log quotes query strings). JSON lines are JSON-escaped already.
"""

from __future__ import annotations

import logging
import numbers
import traceback
from collections.abc import Mapping
from contextvars import ContextVar
from types import TracebackType
from typing import Any

from models.redaction import redact_text
from worker.engine.tasknames import TASK_REAP, TASK_SWEEP
from worker.present.safetext import escape_controls

JSON_FIELDS = "%(asctime)s %(levelname)s %(name)s %(processName)s %(message)s"
FIELDS = ("run_id", "flow", "step")

_current: ContextVar[dict[str, str] | None] = ContextVar("interlude_run", default=None)


def bind(run_id: str, flow: str | None = None, step: str | None = None) -> None:
    """The run this thread (or task) is now working on, for every log line until ``clear``."""
    found = {"run_id": run_id}
    if flow is not None:
        found["flow"] = flow
    if step is not None:
        found["step"] = step
    _current.set(found)


def clear() -> None:
    _current.set(None)


class _Shown:
    """A log argument that prints escaped, however the message formats it (%s, %r)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __str__(self) -> str:
        return _safe(str(self.value))

    def __repr__(self) -> str:
        return _safe(repr(self.value))

    def __format__(self, spec: str) -> str:
        return _safe(format(self.value, spec))


def _safe(text: str) -> str:
    # A credential a client sent where none belongs (a URL's query, which the access log
    # quotes) is redacted as stored submissions are; then the line is made one line.
    return escape_controls(redact_text(text))


def _shown(value: object) -> object:
    # Numbers keep their type (%d, %.1f need it) and print no control character.
    if value is None or isinstance(value, numbers.Number):
        return value
    return _Shown(value)


ExcInfo = tuple[type[BaseException], BaseException, TracebackType | None]
_CAUSE = "\nThe above exception was the direct cause of the following exception:\n\n"
_CONTEXT = "\nDuring handling of the above exception, another exception occurred:\n\n"


def safe_traceback(exc_info: ExcInfo | tuple[None, None, None]) -> str:
    """The traceback as ``logging`` prints it, with each exception's message on one escaped
    line: the frames come from our code, the messages may quote anything."""
    if exc_info[1] is None:
        return ""
    return "".join(_chain(exc_info[1], set())).rstrip("\n")


def _chain(exc: BaseException, seen: set[int]) -> list[str]:
    seen.add(id(exc))
    parts: list[str] = []
    cause, context = exc.__cause__, exc.__context__
    if cause is not None and id(cause) not in seen:
        parts += [*_chain(cause, seen), _CAUSE]
    elif context is not None and not exc.__suppress_context__ and id(context) not in seen:
        parts += [*_chain(context, seen), _CONTEXT]
    if exc.__traceback__ is not None:
        parts.append("Traceback (most recent call last):\n")
        for frame in traceback.format_tb(exc.__traceback__):
            parts += [escape_controls(line) + "\n" for line in frame.rstrip("\n").split("\n")]
    only = "".join(traceback.format_exception_only(type(exc), exc)).rstrip("\n")
    parts.append(escape_controls(only) + "\n")
    return parts


class EscapeControls(logging.Filter):
    """Escapes control characters in a text record's message, arguments and exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "_interlude_escaped", False):
            return True
        msg = record.msg
        record.msg = _safe(msg) if isinstance(msg, str) else _Shown(msg)
        if isinstance(record.args, Mapping):
            record.args = {key: _shown(value) for key, value in record.args.items()}
        elif record.args:
            record.args = tuple(_shown(value) for value in record.args)
        if record.exc_info and not record.exc_text:
            record.exc_text = safe_traceback(record.exc_info)
        record._interlude_escaped = True
        return True


class KeptTraceback(logging.Filter):
    """A logger's filter: a record that brings its traceback as text, bounded and escaped as
    the run keeps it (``extra={"traceback": ...}``), prints that text, not its raw exception."""

    def filter(self, record: logging.LogRecord) -> bool:
        kept = getattr(record, "traceback", None)
        if isinstance(kept, str) and record.exc_info:
            record.exc_text = kept
        return True


# Beat's tasks, every few seconds: an idle worker's log would be mostly their lines.
QUIET_TASKS = frozenset({TASK_SWEEP, TASK_REAP})
# Celery's lines about every task (its worker's "received", its tracer's "succeeded in") and
# beat's about every task it sends; their arguments name the task.
_TASK_LINES = frozenset({"celery.worker.strategy", "celery.app.trace"})
_BEAT_LINE = "celery.beat"


class QuietMaintenance(logging.Filter):
    """Celery's INFO lines about the sweep and the reaper go down to DEBUG: the task received,
    beat sending it, and its success when it found nothing to do. A pass that handled
    something keeps its "succeeded" line (its count), besides its own lines about each run."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno != logging.INFO or not _routine(record):
            return True
        if not logging.getLogger(record.name).isEnabledFor(logging.DEBUG):
            return False
        record.levelno, record.levelname = logging.DEBUG, logging.getLevelName(logging.DEBUG)
        return True


def _routine(record: logging.LogRecord) -> bool:
    args = record.args
    if record.name in _TASK_LINES and isinstance(args, Mapping):
        if args.get("name") not in QUIET_TASKS:
            return False
        # "succeeded in ...: N": N runs or interrupts handled; 0 is routine.
        return str(args.get("return_value", "0")) == "0"
    if record.name == _BEAT_LINE and isinstance(args, tuple) and len(args) == 2:
        return args[1] in QUIET_TASKS
    return False


class RunContext(logging.Filter):
    """Adds run_id, flow and step to records; names them in the text of human lines."""

    def __init__(self, *, as_text: bool) -> None:
        super().__init__()
        self.as_text = as_text

    def filter(self, record: logging.LogRecord) -> bool:
        bound = _current.get() or {}
        for field in FIELDS:
            if getattr(record, field, None) is None and field in bound:
                setattr(record, field, bound[field])
        run_id = getattr(record, "run_id", None)
        if self.as_text and run_id and not getattr(record, "_interlude_named", False):
            named = [f"run {run_id}"]
            named += [
                f"{f} {getattr(record, f)}" for f in ("flow", "step") if getattr(record, f, None)
            ]
            # run_id may be what a caller claimed (a resume contract's): escaped like the rest.
            suffix = escape_controls(f" [{', '.join(named)}]")
            # The suffix is text, not format: a % in it must not be read as a placeholder.
            record.msg = f"{record.msg}{suffix.replace('%', '%%') if record.args else suffix}"
            record._interlude_named = True
        return True


def wants_json() -> bool:
    from models.settings import get_settings

    return get_settings().log_format == "json"


def install(logger: logging.Logger | None = None, **_: Any) -> None:
    """Put the filter (and, for ``INTERLUDE_LOG_FORMAT=json``, a JSON formatter) on the
    handlers of ``logger`` (the root logger by default). Connected to Celery's logging setup."""
    target = logger or logging.getLogger()
    as_json = wants_json()
    formatter = None
    if as_json:
        from pythonjsonlogger.json import JsonFormatter

        formatter = JsonFormatter(JSON_FIELDS)
    for handler in target.handlers:
        if not any(isinstance(f, QuietMaintenance) for f in handler.filters):
            handler.addFilter(QuietMaintenance())
        if not as_json and not any(isinstance(f, EscapeControls) for f in handler.filters):
            handler.addFilter(EscapeControls())
        if not any(isinstance(f, RunContext) for f in handler.filters):
            handler.addFilter(RunContext(as_text=not as_json))
        if formatter is not None:
            handler.setFormatter(formatter)


def install_stderr(level: int = logging.WARNING) -> None:
    """For a process that configures no logging (the command): records from ``level`` up on
    stderr, as Python's last-resort handler prints them, but escaped. Handlers someone else
    set up (a test runner's, an application's) are left as they are."""
    root = logging.getLogger()
    if root.handlers:
        return
    handler = logging.StreamHandler()
    handler.setLevel(level)
    handler.addFilter(EscapeControls())
    root.addHandler(handler)


def escaped_config(config: Mapping[str, Any]) -> dict[str, Any]:
    """A ``logging.config.dictConfig`` dictionary (uvicorn's) whose handlers all escape."""
    escaped = {**config, "filters": {**config.get("filters", {}), "escape": {"()": EscapeControls}}}
    escaped["handlers"] = {
        name: {**handler, "filters": [*handler.get("filters", []), "escape"]}
        for name, handler in config.get("handlers", {}).items()
    }
    return escaped
