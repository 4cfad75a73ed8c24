"""What either database can store: a new row's id, and text without NUL or lone surrogates."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

# The clock's place in an id wraps every 2**32 microseconds, 71.6 minutes.
CLOCK_WRAP = 1 << 32
# Within the 96 bits after the clock: the version nibble (8) and the variant's two bits (10).
_FIXED = (0xF << 76) | (0x3 << 62)
_VERSION_8 = (0x8 << 76) | (0x2 << 62)
_clock_lock = threading.Lock()
_clock_last = 0


def _unlock_in_child() -> None:
    # A child forked while another of its parent's threads held the lock would wait forever.
    global _clock_lock
    _clock_lock = threading.Lock()


os.register_at_fork(after_in_child=_unlock_in_child)


def new_id() -> str:
    """A new row's id: 32 hex digits, a UUID of version 8 (RFC 9562; the layout is ours).

    The first 8 are the microsecond clock modulo 2**32, the other 24 random (90 bits). The
    clock is for the indexes: rows made one after another land side by side in every index
    on their ids or their run's, so that a run written beside a million waiting ones dirties
    a few pages rather than one per key (after a checkpoint, each page's first change is
    written whole to the WAL). Microseconds and the wrap are for people, who name rows by
    prefixes (tables show 8 characters; commands take 6 or more): ids made 256 µs apart
    differ in their first 6, ids made by one process in their first 8 (its clock moves at
    every id), and ids made over hours spread across every prefix as random ones do
    (docs/explanation/performance.md, "Ids that keep a run's rows together")."""
    global _clock_last
    with _clock_lock:
        now = time.time_ns() // 1000
        _clock_last = now if now > _clock_last else _clock_last + 1
        clock = _clock_last
    return id_at(clock)


def id_at(micros: int) -> str:
    """The id ``new_id`` makes at ``micros`` microseconds since the epoch, with new random
    bits (a bulk load gives the moments its rows were made)."""
    bits = int.from_bytes(os.urandom(12)) & ~_FIXED | _VERSION_8
    return f"{micros % CLOCK_WRAP:08x}{bits:024x}"


def storable_text(text: str) -> bool:
    """Whether either database can store ``text``: no NUL (PostgreSQL refuses it in text and
    JSON) and no lone surrogate (no UTF-8 encodes one; Python decodes one from JSON's
    ``"\\ud800"`` or from bytes that are not UTF-8)."""
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
