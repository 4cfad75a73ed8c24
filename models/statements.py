"""Statements built once per shape and executed with parameters: the hot path's SQL.

Building a SQLAlchemy statement and computing its cache key costs more than executing it:
about 2 ms for a step's commit (an UPDATE of the run with its events, checkpoint and effect
outcomes riding along), against well under 1 ms for the round trip. So the statements of the
step and resume paths are built once per *shape* (which columns, which rows ride along) with
bind parameters in place of values, kept, and executed with a dict of values; SQLAlchemy then
finds their compiled form at once.

A write that rides along with a compare-and-set may be *guarded*: built against the rows the
compare-and-set returns, it writes only if that matched. Then the whole commit is one statement
that either happens or does not, and it can run as its own transaction (see
``models.db.transaction(autocommit=True)``).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Table, bindparam, exists, literal_column, select
from sqlalchemy.sql import FromClause, Insert, Update
from sqlalchemy.sql.dml import UpdateBase
from sqlalchemy.sql.elements import BindParameter

# Shapes are few (a handful per call site); the bound only guards against a caller that would
# make a new shape per call.
MAX_SHAPES = 1024

# A write's builder: its statement, with parameters named after a prefix, and a guard or None.
Builder = Callable[[str, "FromClause | None"], UpdateBase]


@dataclass(frozen=True)
class Write:
    """One INSERT or UPDATE, as its shape and its values.

    ``build(prefix, guard)`` makes the statement with its bind parameters named
    ``prefix + name`` (several writes go into one statement); it may depend on the shape only,
    never on the values, which are ``params`` (by name, without the prefix). Given a ``guard``
    (the rows of another write in the same statement), the statement writes only if the
    guard has a row (``insert_row``, ``only_if``).
    """

    shape: Hashable
    build: Builder
    params: dict[str, Any] = field(default_factory=dict)

    def bound(self, prefix: str) -> dict[str, Any]:
        return {prefix + name: value for name, value in self.params.items()}


class Shapes:
    """Statements by shape, built on first use (thread-safe; a race builds one twice).

    A shape names one statement form in the whole store: two builders under one shape would
    share the first one's statement (and its parameter names).
    """

    def __init__(self) -> None:
        self._built: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, shape: Hashable, build: Callable[[], Any]) -> Any:
        found = self._built.get(shape)
        if found is None:
            found = build()
            with self._lock:
                if len(self._built) >= MAX_SHAPES:
                    self._built.clear()
                self._built[shape] = found
        return found


def param(table: Table, column: str, name: str) -> BindParameter[Any]:
    """A bind parameter for ``table.column`` (its type: JSON, UTC timestamps) named ``name``."""
    return bindparam(name, type_=table.c[column].type)


def row_values(table: Table, columns: tuple[str, ...], prefix: str) -> dict[str, Any]:
    """``{column: parameter}`` for the VALUES of an INSERT or the SET of an UPDATE."""
    return {column: param(table, column, prefix + column) for column in columns}


def insert_row(
    statement: Insert, table: Table, columns: tuple[str, ...], prefix: str, guard: FromClause | None
) -> Insert:
    """``statement`` inserting one row of parameters; with ``guard``, one per row of the guard
    (the guard is a compare-and-set of one row: no row, nothing inserted)."""
    if guard is None:
        return statement.values(row_values(table, columns, prefix))
    row = select(*(param(table, column, prefix + column) for column in columns))
    return statement.from_select(list(columns), row.select_from(guard))


U = TypeVar("U", bound=Update)


def only_if(statement: U, guard: FromClause | None) -> U:
    """``statement`` (an UPDATE) restricted to when ``guard`` has a row."""
    if guard is None:
        return statement
    return statement.where(exists(select(literal_column("1")).select_from(guard)))
