"""The one redaction of submitted values (models.redaction): what it replaces, and that
redacting again changes nothing."""

from __future__ import annotations

from models.redaction import REDACTED, redacted, redacted_row

ISSUED = "ilc_" + "a1B2-c3_D4" * 5


def test_credentials_are_replaced_everywhere_in_a_json_value_keys_included() -> None:
    value = {"note": f"key {ISSUED}.", ISSUED: [1, None, {"x": ISSUED}], "n": 2.5}
    assert redacted(value) == {
        "note": f"key {REDACTED}.",
        REDACTED: [1, None, {"x": REDACTED}],
        "n": 2.5,
    }
    assert redacted(redacted(value)) == redacted(value)


def test_the_submitters_own_secret_is_replaced_whatever_its_shape() -> None:
    assert redacted({"a": "xx hunter2-long yy"}, "hunter2-long") == {"a": f"xx {REDACTED} yy"}
    # Too short to look for: it would match ordinary words
    assert redacted("a cat", "cat") == "a cat"


def test_a_row_has_only_its_submitted_columns_redacted() -> None:
    row = {"payload": {"c": ISSUED}, "reason": ISSUED, "detail": ISSUED}
    assert redacted_row(row) == {"payload": {"c": REDACTED}, "reason": ISSUED, "detail": REDACTED}


def test_a_secret_is_found_whatever_characters_json_would_escape_in_it() -> None:
    # The quick look reads the value's JSON text, where these characters are escaped: a
    # secret holding one is looked for the long way, and still found.
    for secret in ('pass"word-1', "back\\slash-2", "tab\there-3", "new\nline-4", "nul\x00byte5"):
        value = {"outer": [{"note": f"x {secret} y"}], f"k{secret}": 1}
        assert redacted(value, secret) == {
            "outer": [{"note": f"x {REDACTED} y"}],
            f"k{REDACTED}": 1,
        }, secret


def test_a_value_with_nothing_to_redact_is_returned_itself() -> None:
    value = {"a": ["b", {"c": 1.5, "d": None}], "ilc": "il" + "c", "e": ("f", "g")}
    assert redacted(value) is value
    assert redacted(value, "a-secret-nowhere") is value
    # A secret found in the JSON text but in no string (a number here) replaces nothing.
    numbers = {"n": 1234567890, "s": ["1234567890"]}
    assert redacted(numbers, "1234567890") == {"n": 1234567890, "s": [REDACTED]}


def test_a_value_that_is_not_json_is_still_redacted_where_it_is_text() -> None:
    value = {"a": {1, 2}, "b": ISSUED, 3: object}
    result = redacted(value)
    assert result["b"] == REDACTED and result["a"] == {1, 2} and result[3] is object
