"""The hot path's statements executed on psycopg itself, compiled once (PostgreSQL only).

This is a fast path for the named statements of ``models.statements``, not a second way to
write SQL: it compiles what their builders build, and sends nothing else; the text it sends
is the PostgreSQL text of ``docs/reference/sql.md`` with ``%(name)s`` for ``:name``
(``tests/unit/test_sql_reference.py`` holds the two equal).

A statement of the step and resume paths is built once per shape (``models.statements``), but
SQLAlchemy still spends about 80 µs of CPU on each execution of it (its cache key, the
compiled-cache lookup, an execution context, the result's objects), more than psycopg's own
work for the statement, and a W1 run executes a dozen of them in two processes. Here such a
statement is compiled once into psycopg's own form (its SQL text, the values SQLAlchemy would
bind for its literals, the type conversions of its parameters and columns), and executed on
the session's connection, inside the session's transaction: the session still begins,
commits and rolls back, and SQLAlchemy still turns errors into its own and invalidates a
connection found dead (``Connection._handle_dbapi_exception``), so callers and their retries
see what they saw before. Listeners of ``before_cursor_execute`` (the tests' and the bench's
statement counts, tracing instrumentation) still hear every statement, with an execution
context of this module's own (``DriverContext``), and ``after_cursor_execute`` ones too.

It relies on parts of SQLAlchemy that are not its public API (the compiler's result columns,
the types' cached processors, the connection's error handler); ``tests/integration/
test_driver_statements.py`` holds both paths to the same results, and pyproject.toml keeps
SQLAlchemy to the 2.x line it was written against.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from psycopg import RawCursor
from sqlalchemy import Connection
from sqlalchemy.engine import Dialect as SQLDialect
from sqlalchemy.sql import ClauseElement

from models.scope import Scope

Processor = Callable[[Any], Any]

_POSTCOMPILE = re.compile(r"__\[POSTCOMPILE_(\w+)\]")
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")


def positional(sql: str) -> tuple[str, tuple[str, ...]]:
    """psycopg's named form of ``sql`` (``%(name)s``, ``%%`` for ``%``) in PostgreSQL's own
    (``$1``, ``$2``...; a name used twice is one number), and the names in their numbers' order.

    psycopg parses a named query at each execution to send it in this form, and caches what it
    found only for queries under 4 KB and 50 parameters, which the claim and the commits are
    not: each of their executions cost about 0.1 ms of CPU to parse again (W1: two in the
    caller, four in the worker). Sent in this form, with its values in order, it is not parsed.
    """
    order: dict[str, int] = {}

    def number(match: re.Match[str]) -> str:
        name = match.group(1)
        if name is None:
            return "%"
        return f"${order.setdefault(name, len(order) + 1)}"

    return _PLACEHOLDER.sub(number, sql), tuple(order)


class NotForDriver(Exception):
    """A statement this module cannot compile once for all executions: SQLAlchemy runs it."""


class Row(tuple[Any, ...]):
    """A result row: a tuple, whose columns are also attributes by name (the first of a name)."""

    __slots__ = ()
    _index: dict[str, int] = {}

    def __getattr__(self, name: str) -> Any:
        try:
            return self[self._index[name]]
        except KeyError:
            raise AttributeError(name) from None


class DriverResult:
    """What the hot path's callers read of a result, as SQLAlchemy's ``Result`` spells it."""

    __slots__ = ("_rows", "rowcount")

    def __init__(self, rows: list[Row], rowcount: int) -> None:
        self._rows = rows
        self.rowcount = rowcount

    def all(self) -> list[Row]:
        return self._rows

    def first(self) -> Row | None:
        return self._rows[0] if self._rows else None

    def scalar_one(self) -> Any:
        if len(self._rows) != 1:
            raise ValueError(f"expected one row, got {len(self._rows)}")
        return self._rows[0][0]

    def scalar_one_or_none(self) -> Any:
        if len(self._rows) > 1:
            raise ValueError(f"expected at most one row, got {len(self._rows)}")
        return self._rows[0][0] if self._rows else None


class DriverContext:
    """The execution context ``before_cursor_execute`` and ``after_cursor_execute`` listeners
    get for a driver statement, in place of SQLAlchemy's (there is none: nothing was compiled
    at execution). Listeners may keep what they need between the two events on it, as
    tracing instrumentation keeps its span; ``driver`` tells it from SQLAlchemy's own."""

    driver = True
    compiled = None
    cache_hit = None
    executemany = False

    def __init__(self, connection: Connection, cursor: Any, statement: str, parameters: Any):
        self.connection = connection
        self.cursor = cursor
        self.statement = statement
        self.parameters = parameters


class DriverStatement:
    """One statement in psycopg's form: SQL text, fixed values, conversions; run ``execute``."""

    def __init__(self, statement: ClauseElement, dialect: SQLDialect) -> None:
        compiled: Any = statement.compile(dialect=dialect)
        if dialect.paramstyle != "pyformat" or compiled.escaped_bind_names:
            raise NotForDriver("parameters not named as psycopg names them")
        self._dialect = dialect
        # Values SQLAlchemy binds on its own (literals, IN lists of constants), by name.
        self.fixed: dict[str, Any] = {}
        required: set[str] = set()  # the values a caller must give
        converting: dict[str, Processor] = {}  # the type conversion of a given value
        expanded: dict[str, str] = {}
        for bind, name in compiled.bind_names.items():
            if bind.callable is not None:
                raise NotForDriver(f"parameter {name} has a value computed at execution")
            process = bind.type._cached_bind_processor(dialect)
            if bind.expanding:
                if bind.required or not isinstance(bind.value, (list, tuple)) or not bind.value:
                    raise NotForDriver(f"parameter {name} is a list given at execution")
                names = [f"{name}_{i}" for i, _ in enumerate(bind.value, 1)]
                for each, value in zip(names, bind.value, strict=True):
                    self.fixed[each] = process(value) if process else value
                expanded[name] = ", ".join(f"%({each})s" for each in names)
            else:
                if process is not None:
                    converting[name] = process
                if bind.required:
                    required.add(name)
                else:
                    self.fixed[name] = process(bind.value) if process else bind.value
        self.sql: str = _POSTCOMPILE.sub(lambda m: expanded[m.group(1)], compiled.string)
        if "POSTCOMPILE" in self.sql:
            raise NotForDriver("a parameter rendered at execution remains")
        if "$" in self.sql:
            raise NotForDriver("a $ in the text would be taken for a parameter's number")
        # What is sent: the same statement with numbered parameters (``positional``).
        raw, self._order = positional(self.sql)
        self._raw = raw.encode()
        self._required = frozenset(required)
        # Each number's name and its conversion, in order: ``arguments`` reads the caller's
        # values straight into the list psycopg sends.
        self._plan = tuple((name, converting.get(name)) for name in self._order)
        columns = list(compiled._result_columns or ())
        self._column_types = [column.type for column in columns]
        index: dict[str, int] = {}
        for i, column in enumerate(columns):
            index.setdefault(column.keyname, i)
        self._row = type("Row", (Row,), {"__slots__": (), "_index": index})
        self._returns_rows = bool(columns)
        # Result conversions depend on the column types the server reports: found on first use
        # (two threads racing there find the same ones).
        self._results: list[tuple[int, Processor]] | None = None

    def arguments(self, given: dict[str, Any]) -> list[Any]:
        """The values psycopg sends, in their numbers' order: the fixed ones, and the caller's
        converted by type, read straight into the list (no dict by name in between: 2.1 %
        fewer instructions per W1 run of interlude's Python)."""
        values: list[Any] = []
        fixed = self.fixed
        for name, process in self._plan:
            if name in given:
                value = given[name]
                values.append(value if process is None else process(value))
            elif name in fixed:
                values.append(fixed[name])
            else:
                missing = sorted(self._required - given.keys())
                raise KeyError(f"no value for parameter(s) {missing}")
        return values

    def parameters(self, given: dict[str, Any]) -> dict[str, Any]:
        """``arguments`` by name, as listeners and errors read them."""
        return self._named(self.arguments(given))

    def _named(self, arguments: list[Any]) -> dict[str, Any]:
        return dict(zip(self._order, arguments, strict=True))

    def execute(self, session: Scope, given: dict[str, Any]) -> DriverResult:
        conn = session.connection()
        arguments = self.arguments(given)
        params: dict[str, Any] | None = None  # the named form, made only for whom reads it
        cursor = _cursor(conn)
        try:
            context = None
            if conn.dispatch.before_cursor_execute or conn.dispatch.after_cursor_execute:
                # Listeners hear the statement in its named form, as SQLAlchemy's path sends it.
                params = self._named(arguments)
                context = DriverContext(conn, cursor, self.sql, params)
                conn.dispatch.before_cursor_execute(conn, cursor, self.sql, params, context, False)
            cursor.execute(self._raw, arguments)
            raw = cursor.fetchall() if self._returns_rows else []
            if raw and self._results is None:
                # (psycopg builds the description anew at each reading: read it only here.)
                self._results = self._result_processors(cursor.description or ())
            rowcount = cursor.rowcount
            if context is not None:
                conn.dispatch.after_cursor_execute(conn, cursor, self.sql, params, context, False)
        except BaseException as exc:
            # (SQLAlchemy closes the cursor of a failed statement: the next one makes another.)
            conn.connection.info.pop(_CURSOR, None)
            named = params if params is not None else self._named(arguments)
            _raise_as_sqlalchemy(conn, exc, self.sql, named, cursor)
        return DriverResult(self._rows(raw), rowcount)

    def _rows(self, raw: list[Any]) -> list[Row]:
        if not raw:
            return []
        results = self._results or []
        make = self._row
        if not results:
            return [make(row) for row in raw]
        rows = []
        for row in raw:
            values = list(row)
            for i, process in results:
                values[i] = process(values[i])
            rows.append(make(values))
        return rows

    def _result_processors(self, description: Sequence[Any]) -> list[tuple[int, Processor]]:
        found = []
        for i, (type_, column) in enumerate(zip(self._column_types, description, strict=False)):
            process = type_._cached_result_processor(self._dialect, column[1])
            if process is not None:
                found.append((i, process))
        return found


# In the pool's record of a DBAPI connection (kept as long as the connection is).
_CURSOR = "interlude_driver_cursor"


def _cursor(conn: Connection) -> RawCursor[Any]:
    """The cursor driver statements use on ``conn``'s psycopg connection, made once for it.

    A cursor keeps the dumpers and loaders it looked up (by each parameter's Python type, each
    column's type), which a new cursor for every statement looked up again: about 10 µs a
    statement here. A connection runs one statement at a time (one thread holds it), and each
    execution replaces the last one's results.
    """
    record = conn.connection
    driver = record.driver_connection
    kept: RawCursor[Any] | None = record.info.get(_CURSOR)
    if kept is None or kept.closed or kept.connection is not driver:
        kept = record.info[_CURSOR] = RawCursor(driver)  # type: ignore[arg-type]
    return kept


def _raise_as_sqlalchemy(
    conn: Connection, exc: BaseException, sql: str, params: Any, cursor: Any
) -> Any:
    """Raise ``exc`` as SQLAlchemy would have: a driver error wrapped (IntegrityError,
    OperationalError...) and the connection invalidated if it is dead, so that
    ``once_more_if_disconnected`` and the callers' ``except IntegrityError`` work as on
    SQLAlchemy's own path; the connection invalidated too when an interruption (Ctrl-C, a
    process exiting) stopped it in the middle of a statement; anything else as it is."""
    if isinstance(exc, conn.dialect.loaded_dbapi.Error) or not isinstance(exc, Exception):
        conn._handle_dbapi_exception(exc, sql, params, cursor, None)  # raises
    raise exc
