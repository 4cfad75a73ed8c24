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

    Values that are not JSON containers or text are returned as they are.
    """
    if isinstance(value, str):
        return redact_text(value, secret)
    if isinstance(value, list | tuple):
        return [redacted(item, secret) for item in value]
    if isinstance(value, dict):
        return {redacted(key, secret): redacted(item, secret) for key, item in value.items()}
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
