"""What an inbox card says beside the question, so that two requests can be told apart: the
flow and run it comes from, and one line each of its scope and evidence."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from models.contracts import InterruptView
from models.db import transaction
from models.run_pages import flow_names

# A card's line of scope or evidence, at most.
SUMMARY_CHARS = 160


def flows_of(items: Iterable[InterruptView]) -> dict[str, str]:
    """The flow of each item's run, by run id (one query for a page of cards)."""
    run_ids = sorted({item.run_id for item in items})
    if not run_ids:
        return {}
    with transaction(readonly=True) as session:
        return flow_names(session, run_ids)


def summary(value: Any, limit: int = SUMMARY_CHARS) -> str:
    """``value`` in one line: ``key: value`` pairs of a mapping in key order (PostgreSQL's
    JSON keeps no order of its own; nested values as compact JSON), anything else as compact
    JSON; cut at ``limit`` characters."""
    if isinstance(value, dict):
        parts = [f"{key}: {_compact(value[key])}" for key in sorted(value, key=str)]
        text = " · ".join(parts) if parts else "none"
    elif value is None:
        text = "none"
    else:
        text = _compact(value)
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _compact(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=str)
