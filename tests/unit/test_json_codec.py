"""models.json_codec writes what json.dumps writes and reads what json.loads reads, errors too."""

from __future__ import annotations

import json
import math
from typing import Any

import pytest

from models.json_codec import dumps, loads

VALUES: list[Any] = [
    None,
    True,
    0,
    -(2**70),
    1.5,
    1e300,
    float("nan"),
    float("inf"),
    "",
    'text with "quotes", \\ and \n and é and \u2028 and 😀',
    "\ud800",  # a lone surrogate: written as an escape, as json does
    [],
    {},
    [1, [2, [3, {"a": None}]]],
    {"k": "v", "n": 2, "nested": {"list": [1.0, "x", False]}, "é": "ü"},
    {1: "int key", 2.5: "float key", False: "bool key", None: "null key"},
    ("a", "tuple"),
]


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_text_written_is_jsons(value: Any) -> None:
    assert dumps(value) == json.dumps(value)
    assert dumps(value, ensure_ascii=False) == json.dumps(value, ensure_ascii=False)


@pytest.mark.parametrize("value", VALUES, ids=repr)
def test_the_value_read_is_jsons(value: Any) -> None:
    text = json.dumps(value)
    for data in (text, text.encode(), memoryview(text.encode())):
        got, expected = loads(data), json.loads(text)
        if isinstance(expected, float) and math.isnan(expected):
            assert math.isnan(got)
        else:
            assert got == expected and type(got) is type(expected)


def test_what_json_cannot_write_fails_as_in_json() -> None:
    cycle: list[Any] = []
    cycle.append(cycle)
    for bad, error in ((cycle, ValueError), ({"s": {1, 2}}, TypeError), ({(1, 2): 3}, TypeError)):
        with pytest.raises(error) as ours:
            dumps(bad)
        with pytest.raises(error) as theirs:
            json.dumps(bad)
        assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize(
    "data",
    [b' {"a": 1} ', b'\xef\xbb\xbf{"a": 1}', '{"a": 1}\n'.encode("utf-16")],
    ids=["spaces", "utf-8 BOM", "utf-16"],
)
def test_text_the_quick_path_does_not_take_is_read_by_json(data: bytes) -> None:
    assert loads(data) == json.loads(data) == {"a": 1}


@pytest.mark.parametrize("data", [b"", b"{", b'{"a": 1} x', b"[1,]", b"\xff", b"nul"])
def test_what_json_cannot_read_fails_as_in_json(data: bytes) -> None:
    with pytest.raises(ValueError) as ours:
        loads(data)
    with pytest.raises(ValueError) as theirs:
        json.loads(data)
    assert type(ours.value) is type(theirs.value) and str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("value", [float("nan"), [1, {"x": float("inf")}], -float("inf")], ids=repr)
def test_numbers_json_refuses_without_allow_nan_are_refused_the_same_way(value: Any) -> None:
    with pytest.raises(ValueError) as ours:
        dumps(value, allow_nan=False)
    with pytest.raises(ValueError) as theirs:
        json.dumps(value, allow_nan=False)
    assert str(ours.value) == str(theirs.value)
    assert dumps([1.5, "x"], allow_nan=False) == json.dumps([1.5, "x"], allow_nan=False)
