"""Text that callers supplied, made safe to print on a terminal or to write in a log line.

Control characters (C0, DEL, C1), line and paragraph separators and invisible format
characters (bidi overrides and isolates, zero-width marks) are written as escapes (``\\x1b``,
``\\u202e``), so a value can neither move the cursor, recolour the screen, end the line nor
reorder what a reader sees: it cannot forge a line of output or of a log.
"""

from __future__ import annotations

import re
import unicodedata

# Unicode categories never shown as themselves: controls, format characters (bidi, zero
# width), line and paragraph separators.
UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp"})
# What is not printable ASCII: only these characters can be unsafe, so only they are looked up.
_CANDIDATE = re.compile(r"[^\x20-\x7e]")
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escaped(match: re.Match[str]) -> str:
    char = match.group()
    if char in _SHORT:
        return _SHORT[char]
    if unicodedata.category(char) not in UNSAFE_CATEGORIES:
        return char
    point = ord(char)
    if point <= 0xFF:
        return f"\\x{point:02x}"
    if point <= 0xFFFF:
        return f"\\u{point:04x}"
    return f"\\U{point:08x}"


def escape_controls(text: str) -> str:
    """``text`` with every control, separator and format character written as an escape."""
    if text.isascii() and text.isprintable():
        return text
    return _CANDIDATE.sub(_escaped, text)
