"""Database errors as one line an operator can act on (the CLI prints these)."""

from __future__ import annotations

from sqlalchemy.exc import DBAPIError, SQLAlchemyError

UPGRADE_HINT = "run `interlude db upgrade`"
# How a SQLite database file that is not there is reported (only the upgrade creates one).
NO_DATABASE_FILE = "no database file at"
# PostgreSQL SQLSTATEs, and SQLite's messages, for a schema that is missing or behind.
_UNDEFINED_TABLE = "42P01"
_UNDEFINED_COLUMN = "42703"


def describe(exc: BaseException) -> str | None:
    """One line for a SQLAlchemy error (None when ``exc`` is not one)."""
    if not isinstance(exc, SQLAlchemyError):
        return None
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip()
    first = text.splitlines()[0] if text else type(exc).__name__
    code = getattr(original, "sqlstate", None)
    if code == _UNDEFINED_TABLE or first.startswith(("no such table", NO_DATABASE_FILE)):
        return f"the database has no interlude schema yet ({first}): {UPGRADE_HINT}"
    if code == _UNDEFINED_COLUMN or first.startswith("no such column"):
        return f"the database schema is older than this interlude ({first}): {UPGRADE_HINT}"
    if isinstance(exc, DBAPIError) and exc.connection_invalidated:
        return f"lost the connection to the database: {first}"
    return f"database error: {first}"
