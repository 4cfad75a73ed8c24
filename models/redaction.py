"""The one redaction of what a submitter sent, applied wherever it is stored.

Whatever an actor submits (a resume attempt, the input it answered with, the input kept for a
renewed review, a reason an event records) may hold a credential pasted by mistake; whoever
later reads the record (another actor, an operator, a notifier) could then answer as its
owner. So every such value passes through ``redacted`` before it is written: text shaped like
a credential interlude issued is replaced, and so is the submitter's own credential when the
caller has it (a wrong one, that is not shaped like one, may still be someone's secret).
Redacting twice changes nothing.
"""

from __future__ import annotations

from typing import Any

from models import json_codec
from models.identity import CREDENTIAL_PREFIX, CREDENTIAL_SHAPE

REDACTED = f"{CREDENTIAL_PREFIX}[redacted]"
# A submitted credential shorter than this is not looked for in text: it would match words.
MIN_SECRET = 8


def redact_text(text: str, secret: str | None = None) -> str:
    """``text`` with ``secret`` (if given and long enough) and anything shaped like an issued
    credential replaced by ``ilc_[redacted]``."""
    if secret is not None and len(secret) >= MIN_SECRET and secret in text:
        text = text.replace(secret, REDACTED)
    if CREDENTIAL_PREFIX not in text:  # the common case: no regular expression at all
        return text
    return CREDENTIAL_SHAPE.sub(REDACTED, text)


def redacted(value: Any, secret: str | None = None) -> Any:
    """The JSON value ``value`` with ``redact_text`` applied to every string in it, keys too.

    Values that are not JSON containers or text are returned as they are, and so is a
    container in which nothing needs redacting (the same object, not a copy).
    """
    if isinstance(value, str):
        return redact_text(value, secret)
    if isinstance(value, list | tuple | dict) and _nothing_to_redact(value, secret):
        return value
    return _redacted(value, secret)


def _nothing_to_redact(value: Any, secret: str | None) -> bool:
    """Whether no text in ``value`` holds the credential prefix or ``secret``, decided from the
    value's JSON text, made in one pass in C: most values redacted are an engine's event
    details and answers with nothing in them, and walking them in Python was a measurable part
    of a step's and a resume's CPU.

    In that text every string (keys too) appears as itself but for the characters JSON
    escapes (quotes, backslashes, control characters), none of which is in the prefix; a
    ``secret`` holding one is looked for the long way. A match that is in no string (a secret
    of digits found in a number) only sends the value the long way too, and so does a value
    that is not JSON.
    """
    hunted = secret if secret is not None and len(secret) >= MIN_SECRET else None
    try:
        text = json_codec.dumps(value, ensure_ascii=False)
        if hunted is not None and json_codec.dumps(hunted, ensure_ascii=False)[1:-1] != hunted:
            return False
    except (TypeError, ValueError):
        return False
    return CREDENTIAL_PREFIX not in text and (hunted is None or hunted not in text)


def _redacted(value: Any, secret: str | None) -> Any:
    if isinstance(value, str):
        return redact_text(value, secret)
    if isinstance(value, list | tuple):
        return [_redacted(item, secret) for item in value]
    if isinstance(value, dict):
        return {_redacted(key, secret): _redacted(item, secret) for key, item in value.items()}
    return value


# The columns that hold what submitters sent: the input an answer gave, the input kept for a
# renewed review, an attempt's payload, an event's detail (a cancel's reason, say).
SUBMITTED_COLUMNS = frozenset({"resume_input", "previous_input", "payload", "detail"})


def redacted_row(values: dict[str, Any]) -> dict[str, Any]:
    """``values`` (a row about to be written) with its ``SUBMITTED_COLUMNS`` redacted."""
    found = SUBMITTED_COLUMNS & values.keys()
    if not found:
        return values
    return {**values, **{column: redacted(values[column]) for column in found}}
