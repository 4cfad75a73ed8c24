"""Log lines about a run name the run, its flow and its step; ``INTERLUDE_LOG_FORMAT=json``.

The step runtime binds the run it is executing (``bind``); a filter on the process's handlers
adds ``run_id``, ``flow`` and ``step`` to every record from that context (or from the record's
own ``extra``), and appends them to the text of human-readable lines.
"""

from __future__ import annotations

import logging
from contextvars import ContextVar
from typing import Any

from models.settings import get_settings

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
            record.msg = f"{record.msg} [{', '.join(named)}]"
            record._interlude_named = True
        return True


def wants_json() -> bool:
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
        if not any(isinstance(f, RunContext) for f in handler.filters):
            handler.addFilter(RunContext(as_text=not as_json))
        if formatter is not None:
            handler.setFormatter(formatter)
