"""JSON that people type (a command-line option, a form field): finite numbers only.

Python's parser reads ``1e999`` as infinity and ``NaN`` as not-a-number; neither is JSON that
a contract, a run's input or either database can carry, so both are refused while parsing,
with a ValueError that says which number.
"""

from __future__ import annotations

import json
import math
from typing import Any


def finite_number(text: str) -> float:
    """``text`` as a float, or ValueError when it is out of range (``1e999``, ``nan``)."""
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text[:40]} is out of range (finite numbers only)")
    return value


def loads_finite(text: str) -> Any:
    """``json.loads`` that refuses non-finite numbers (ValueError), as JSON itself does."""
    return json.loads(text, parse_float=finite_number, parse_constant=_not_a_number)


def _not_a_number(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (finite numbers only)")
