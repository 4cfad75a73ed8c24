"""JSON to and from PostgreSQL's driver: the text ``json`` would write and the values it would
read, without its per-call set-up.

A W1 run sends about thirty JSON parameters and reads about twenty JSON columns, most of them a
few dozen bytes, where ``json.dumps`` and ``json.loads`` spend more on their own Python (the
options checked, an encoder built for every call, the text's encoding detected) than on the
value: about 3.8 µs each here against 2.0 and 1.5 µs for the same C encoder and scanner called
directly. The output and the values read are exactly ``json``'s (the same C functions, the same
options: ASCII-only text, ``NaN`` written as ``json`` writes it, cycles refused); anything the
quick path does not take (a text with surrounding space) goes through ``json`` itself.

``install`` sets them on one psycopg connection (``models.dialects`` does it for each
connection of interlude's engines): other psycopg users in the process keep psycopg's own.
``models.contracts.json_copy`` (every value interlude stores passes through it) uses them too.
"""

from __future__ import annotations

import json
from json.encoder import (  # type: ignore[attr-defined]
    c_make_encoder,
    encode_basestring,
    encode_basestring_ascii,
)
from typing import Any

from psycopg.types.json import set_json_dumps, set_json_loads

_default = json.JSONEncoder().default  # (raises TypeError for what JSON does not hold)
_scan = json.JSONDecoder().scan_once  # type: ignore[attr-defined]


def dumps(value: Any, *, allow_nan: bool = True, ensure_ascii: bool = True) -> str:
    """``json.dumps(value, allow_nan=allow_nan, ensure_ascii=ensure_ascii)``, character for
    character."""
    if c_make_encoder is None:  # (a Python built without the C accelerator)
        return json.dumps(value, allow_nan=allow_nan, ensure_ascii=ensure_ascii)
    strings = encode_basestring_ascii if ensure_ascii else encode_basestring
    # A markers dict per call, as json.dumps's check_circular: a cycle is a ValueError.
    encode = c_make_encoder({}, _default, strings, None, ": ", ", ", False, False, allow_nan)
    return "".join(encode(value, 0))


def loads(data: bytes | bytearray | memoryview | str) -> Any:
    """``json.loads(data)``: the same value, or the same error."""
    try:
        text = data if isinstance(data, str) else str(data, "utf-8")
        value, end = _scan(text, 0)
        if end == len(text):
            return value
    except (StopIteration, UnicodeDecodeError):
        pass
    # Space around it, a BOM, not UTF-8, not JSON at all: json decides, value or error.
    return json.loads(data if isinstance(data, str | bytes | bytearray) else bytes(data))


def install(dbapi_connection: Any) -> None:
    """Use these for the json and jsonb values of this psycopg connection."""
    set_json_dumps(dumps, dbapi_connection)
    set_json_loads(loads, dbapi_connection)
