"""Ids as operators type them: a unique prefix of 6 or more characters stands for the whole id."""

from __future__ import annotations

from models.db import transaction
from models.errors import (
    AmbiguousIdError,
    InterruptNotFoundError,
    InvalidInputError,
    RunNotFoundError,
)
from models.operator_queries import MAX_CANDIDATES, ids_with_prefix
from models.tables import Interrupt, Run

MIN_PREFIX = 6


def resolve_run_id(given: str) -> str:
    """The full id of the one run whose id is ``given`` or starts with it."""
    found = _matches(Run, "run", given)
    if not found:
        raise RunNotFoundError(run_id=given)
    return found


def resolve_interrupt_id(given: str) -> str:
    """The full id of the one interrupt whose id is ``given`` or starts with it."""
    found = _matches(Interrupt, "interrupt", given)
    if not found:
        raise InterruptNotFoundError(interrupt_id=given)
    return found


def _matches(table: type[Run] | type[Interrupt], kind: str, given: str) -> str | None:
    text = given.strip().lower()
    if len(text) < MIN_PREFIX:
        raise InvalidInputError(
            detail=f"{kind} id {given!r} is too short: give at least {MIN_PREFIX} characters"
        )
    with transaction(readonly=True) as session:
        found = ids_with_prefix(session, table, text)
    if text in found or len(found) == 1:
        return text if text in found else found[0]
    if not found:
        return None
    shown = ", ".join(found[:MAX_CANDIDATES]) + (", …" if len(found) > MAX_CANDIDATES else "")
    raise AmbiguousIdError(kind=kind, prefix=given, candidates=shown)
