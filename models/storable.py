"""What either database can store: a new row's id, and text without NUL or lone surrogates."""

from __future__ import annotations

import os
import time
from typing import Any

_LOW_62 = (1 << 62) - 1
_VARIANT = 2 << 62  # RFC 9562's variant, binary 10, in the top bits of the last 64


def new_id() -> str:
    """A new row's id: 32 hex digits of a UUID version 7 (RFC 9562), now's milliseconds since
    the epoch, then 74 random bits.

    Time-ordered, not random (``uuid4``), for the indexes a row enters by its id or its run's:
    a new run's keys land at the newest edge of each, pages already in memory, where random
    keys each land on a page of their own. Beside a million waiting runs, right after a
    checkpoint, random ids cost W1 ten full-page images a run in the WAL, 76 KB a run against
    15 on an empty database; these cost two, 29 KB. An id tells when its row was made, which
    its row says anyway. A clock set back costs the indexes that locality for a while, never
    an id's uniqueness, which rests on the random bits."""
    ms = time.time_ns() // 1_000_000
    rand = int.from_bytes(os.urandom(10), "big")
    # 48 bits of time, the version (7), 12 random bits, the variant (binary 10), 62 random bits.
    return f"{ms:012x}7{rand >> 68:03x}{rand & _LOW_62 | _VARIANT:016x}"


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
