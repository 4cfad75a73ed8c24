"""What either database can store: a new row's id, and text without NUL or lone surrogates."""

from __future__ import annotations

import uuid
from typing import Any


def new_id() -> str:
    """A new row's id: 32 random hex digits (``uuid4``). Random, not time-ordered, so that
    the first few characters name a row: tables show ids by their first 8, and every command
    takes a unique prefix of 6 or more. Time-ordered ids (UUID version 7) would cut the WAL a
    run writes beside a million waiting ones, but runs made within a minute would share
    their first 8 characters (docs/explanation/performance.md, "Tried, and not kept")."""
    return uuid.uuid4().hex


def storable_text(text: str) -> bool:
    """Whether either database can store ``text``: no NUL (PostgreSQL refuses it in text and
    JSON) and no lone surrogate (no UTF-8 encodes one; Python decodes one from JSON's
    ``"\ud800"`` or from bytes that are not UTF-8)."""
    if "\x00" in text:
        return False
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_copy(text: str) -> str:
    """``text`` with what no database stores (NUL, lone surrogates) written as escapes."""
    if storable_text(text):
        return text
    return text.replace("\x00", "\\u0000").encode("utf-8", "backslashreplace").decode("utf-8")


def unstorable_where(value: Any) -> str | None:
    """Where ``value`` (JSON) holds text with NUL or lone surrogates, in a key or a value at
    any depth: ``" at 'a.b[0]'"``, ``""`` for the value itself, None if nowhere."""
    stack: list[tuple[Any, str]] = [(value, "")]
    while stack:
        item, path = stack.pop()
        if isinstance(item, str) and not storable_text(item):
            return _where(path)
        if isinstance(item, dict):
            for key, child in item.items():
                inner = f"{path}.{key}" if path else key
                if not storable_text(key):
                    return _where(inner)
                stack.append((child, inner))
        elif isinstance(item, list):
            stack.extend((child, f"{path}[{index}]") for index, child in enumerate(item))
    return None


def _where(path: str) -> str:
    # repr: the path may hold the very characters refused; cut so that the line stays short.
    return f" at {path[:60]!r}" if path else ""


def storable_id(value: object) -> bool:
    """Whether ``value`` could name a stored row: storable text. A lookup by any other id is
    answered "none" without asking the database, which would refuse the text itself."""
    return isinstance(value, str) and storable_text(value)
