"""Check 1's first half: what was submitted, as storable JSON, and why it cannot be a contract.

Anything at all may be submitted, so every failure here becomes a reason, never an error.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from pydantic_core import to_jsonable_python

from models import json_codec
from models.storable import storable_copy

MAX_ID = 200
# A contract larger than this is malformed (it is not parsed at all).
MAX_PAYLOAD_CHARS = 64 * 1024


def first_error(exc: ValidationError) -> str:
    error = exc.errors()[0]
    where = ".".join(str(p) for p in error["loc"]) or "contract"
    return f"{where}: {error['msg']}"


def short_str(value: object) -> str | None:
    return value[:MAX_ID] if isinstance(value, str) else None


def read_payload(contract: Any) -> tuple[Any, Any, str | None]:
    """What was submitted: as storable JSON, as the fields to read ids from, and why it cannot
    be a contract (None if it can).

    Anything at all may be submitted, so every failure here becomes a reason, never an error.
    """
    try:
        text = json_codec.dumps(to_jsonable_python(contract), allow_nan=False)
    except Exception as exc:
        unparseable = {"unparseable": _storable(_repr(contract))}
        return unparseable, None, f"contract is not JSON: {exc}"[:300]
    data = json_codec.loads(text)
    if len(text) <= MAX_PAYLOAD_CHARS and "\\u0000" not in text and "\\ud" not in text:
        # The common case, told from the text: no NUL and no surrogate at all (json writes
        # both as escapes), so nothing to escape, and no walk through the whole contract.
        return data, data, None
    stored = _storable(data)
    if len(text) > MAX_PAYLOAD_CHARS:
        truncated = {"truncated": _storable(text[:MAX_PAYLOAD_CHARS])}
        return truncated, stored, f"contract is larger than {MAX_PAYLOAD_CHARS} characters"
    if stored != data:
        return stored, stored, "contract holds NUL or unpaired surrogate characters"
    return data, data, None


def _repr(value: Any) -> str:
    try:
        return repr(value)[:MAX_PAYLOAD_CHARS]
    except Exception:
        return f"<{type(value).__name__}>"


def _storable(value: Any) -> Any:
    """``value`` with the text both databases refuse (NUL, lone surrogates) escaped."""
    if isinstance(value, str):
        return storable_copy(value)
    if isinstance(value, list):
        return [_storable(item) for item in value]
    if isinstance(value, dict):
        return {_storable(key): _storable(item) for key, item in value.items()}
    return value
