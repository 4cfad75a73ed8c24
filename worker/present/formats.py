"""How values are written for people, alike on the command line and in the web inbox: ages,
deadlines and timestamps in UTC, and values as one line of JSON.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

COMPACT_LIMIT = 80


def format_age(seconds: float) -> str:
    """``45s``, ``4m05s``, ``3h12m``, ``2d04h``: two units at most, for people."""
    total = max(0, int(seconds))
    if total < 60:
        return f"{total}s"
    minutes, secs = divmod(total, 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def aware(moment: datetime) -> datetime:
    # SQLite hands back naive datetimes; interlude stores every time in UTC.
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def seconds_since(moment: datetime, now: datetime | None = None) -> float:
    return ((now or datetime.now(UTC)) - aware(moment)).total_seconds()


def age(moment: datetime, now: datetime | None = None) -> str:
    return format_age(seconds_since(moment, now))


def until(moment: datetime, now: datetime | None = None) -> str:
    """``in 59m00s`` for a deadline ahead, ``overdue 3m10s`` for one that passed."""
    left = -seconds_since(moment, now)
    return f"in {format_age(left)}" if left >= 0 else f"overdue {format_age(-left)}"


def timestamp(moment: datetime | None, *, precise: bool = False) -> str:
    """UTC, to the second (or the millisecond, for timelines)."""
    if moment is None:
        return "-"
    text = aware(moment).astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return text[:-3] if precise else text[:-7]


def compact(value: Any, limit: int = COMPACT_LIMIT) -> str:
    """One-line JSON of ``value``, cut at ``limit`` characters."""
    if value is None:
        return "-"
    text = value if isinstance(value, str) else json.dumps(jsonable(value), default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def jsonable(value: Any) -> Any:
    """Pydantic models and containers of them as plain JSON values."""
    # Duck-typed: importing pydantic here would slow every command down, --help included.
    model_dump = getattr(value, "model_dump", None)
    if callable(model_dump) and not isinstance(value, type):
        return model_dump(mode="json")
    if isinstance(value, Mapping):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if isinstance(value, datetime):
        return aware(value).isoformat()
    return value
