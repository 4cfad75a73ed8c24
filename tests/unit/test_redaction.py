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
