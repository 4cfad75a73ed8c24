"""Database errors as one line an operator can act on (the CLI prints these)."""

from __future__ import annotations

from typing import TypeGuard

from sqlalchemy.exc import DBAPIError, OperationalError, SQLAlchemyError

UPGRADE_HINT = "run `interlude db upgrade`"
# How a SQLite database file that is not there is reported (only the upgrade creates one).
NO_DATABASE_FILE = "no database file at"
# PostgreSQL SQLSTATEs, and SQLite's messages, for a schema that is missing or behind.
_UNDEFINED_TABLE = "42P01"
_UNDEFINED_COLUMN = "42703"
# Errors another attempt a moment later may not meet: a connection lost or refused (class 08),
# a server shutting down or starting (57P01 admin shutdown, 57P02 crash shutdown, 57P03 cannot
# connect now), a serialization failure or deadlock (40001, 40P01).
_TRANSIENT_CLASS = "08"
_TRANSIENT_STATES = frozenset({"57P01", "57P02", "57P03", "40001", "40P01"})
# SQLite's, by name: another writer holds the database.
_SQLITE_BUSY = frozenset({"SQLITE_BUSY", "SQLITE_LOCKED"})


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


def is_transient(exc: BaseException) -> TypeGuard[DBAPIError]:
    """Whether ``exc`` is a database error that trying again shortly may not meet (a lost or
    refused connection, a restarting server, a serialization failure), rather than a mistake."""
    if not isinstance(exc, DBAPIError):
        return False
    if exc.connection_invalidated:
        return True
    original = exc.orig
    code = getattr(original, "sqlstate", None)
    if isinstance(code, str):
        return code.startswith(_TRANSIENT_CLASS) or code in _TRANSIENT_STATES
    if getattr(original, "sqlite_errorname", None) in _SQLITE_BUSY:
        return True
    # psycopg gives no SQLSTATE for a connection it could not make (refused, reset, timed out).
    return isinstance(exc, OperationalError) and type(original).__module__.startswith("psycopg")
