"""A failed step's traceback as its run keeps it: the step's own frames, bounded, storable."""

from __future__ import annotations

from models.storable import storable_copy
from worker.ops.runlog import safe_traceback

# What an event keeps of one traceback: the innermost frames and the error, where the cause is.
MAX_TRACEBACK = 16_000


def step_traceback(exc: BaseException) -> str:
    """``exc``'s traceback (with its causes) as logging prints it, escaped, at most
    ``MAX_TRACEBACK`` characters: the outermost frames are cut first."""
    text = safe_traceback((type(exc), exc, exc.__traceback__))
    if len(text) > MAX_TRACEBACK:
        cut = len(text) - MAX_TRACEBACK
        text = f"[{cut} characters of outer frames cut]\n{text[-MAX_TRACEBACK:]}"
    return storable_copy(text)
