"""Checking the arguments of the public Python API before anything is read or written.

An argument of the wrong type or out of range is InvalidInputError: one line that names the
parameter and quotes what was given, instead of whatever the driver makes of it (a Python
TypeError, "bigint out of range" from PostgreSQL, a LIMIT that SQLite reads as "no limit").
Plain ``isinstance`` checks only: ``enqueue_run``, on the benchmarked path, calls these.
"""

from __future__ import annotations

import math
import reprlib
from datetime import UTC, date, datetime

from models.errors import InvalidInputError
from models.settings import LARGEST_COUNT
from models.storable import storable_text

# The most rows one listing returns or one batch takes: the bound INTERLUDE_SWEEP_BATCH has.
# Above the command's --limit (which asks for one row more, to tell whether there are more).
MAX_COUNT = LARGEST_COUNT
# The largest id a 64-bit column holds: how far back a page cursor (``before``) may start.
MAX_ROW_ID = 2**63 - 1
# An integer of more bits is quoted by its size: repr() of one of 4,300 digits raises.
SHOWN_BITS = 128

_AWARE = "must be an aware datetime (UTC)"

_quote = reprlib.Repr()
_quote.maxstring = 40
_quote.maxother = 40


def shown(value: object) -> str:
    """``value`` as an error quotes it: a short repr, however big or odd the value."""
    if isinstance(value, int) and value.bit_length() > SHOWN_BITS:
        return f"an integer of about {int(value.bit_length() * math.log10(2))} digits"
    if isinstance(value, date):  # and datetime: as written, not as the constructor call
        return f"{type(value).__name__} {value.isoformat()}"
    try:
        return _quote.repr(value)
    except Exception:  # a container holding a huge integer; a repr that fails
        return f"a {type(value).__name__}"


def text(name: str, value: object) -> str:
    """``value`` if it is text either database can hold (no NUL, no lone surrogate)."""
    if not isinstance(value, str):
        raise InvalidInputError(detail=f"{name} must be text, got {shown(value)}")
    if not storable_text(value):
        # PostgreSQL refuses such text as a driver error; no stored row holds it anyway.
        raise InvalidInputError(detail=f"{name} holds NUL or unpaired surrogate characters")
    return value


def optional_text(name: str, value: object) -> str | None:
    return None if value is None else text(name, value)


def count(name: str, value: object, maximum: int = MAX_COUNT) -> int:
    """``value`` if it is a whole number from 1 to ``maximum``.

    ``True`` is an int to Python but never meant as one; 1.0 and nan are refused, not rounded.
    """
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= maximum:
        raise InvalidInputError(
            detail=f"{name} must be a whole number from 1 to {maximum}, got {shown(value)}"
        )
    return value


def optional_count(name: str, value: object, maximum: int = MAX_COUNT) -> int | None:
    return None if value is None else count(name, value, maximum)


def amount(name: str, value: object) -> float:
    """``value`` as a float if it is a finite number of at least 0."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise InvalidInputError(detail=f"{name} must be a non-negative number, got {shown(value)}")
    try:
        number = float(value)
    except OverflowError:  # an integer past the largest float
        number = math.inf
    if not math.isfinite(number) or number < 0:
        raise InvalidInputError(detail=f"{name} must be a non-negative number, got {shown(value)}")
    return number


def moment(name: str, value: object) -> datetime:
    """``value`` if it is a timezone-aware datetime that UTC can express.

    Timestamps are stored in UTC: a naive datetime has no one meaning (local time? UTC?), so it
    is refused rather than guessed at, as the timestamp columns themselves refuse it.
    """
    if not isinstance(value, datetime):
        raise InvalidInputError(detail=f"{name} {_AWARE}, got {shown(value)}")
    if value.utcoffset() is None:
        raise InvalidInputError(detail=f"{name} {_AWARE}, got a naive one")
    try:
        value.astimezone(UTC)
    except OverflowError:  # 0001-01-01T00:00:00+14:00 is before the first moment UTC has
        raise InvalidInputError(
            detail=f"{name} is outside the years 1 to 9999 once in UTC, got {shown(value)}"
        ) from None
    return value


def optional_moment(name: str, value: object) -> datetime | None:
    return None if value is None else moment(name, value)


def flag(name: str, value: object) -> bool:
    """``value`` if it is True or False: a truthy stand-in could mean the opposite."""
    if not isinstance(value, bool):
        raise InvalidInputError(detail=f"{name} must be True or False, got {shown(value)}")
    return value
