"""The statements the engine sends, each under a name, built once per shape.

Every statement of the stores is registered here (``STATEMENTS``) under a unique, readable
name (``run.claim_at_once``, ``interrupt.insert``) with the function that builds it; the
builder's docstring says what it does and who sends it, and ``docs/reference/sql.md``
(``python -m models.sql_reference``) shows each one as PostgreSQL and SQLite receive it.

Building a SQLAlchemy statement and computing its cache key costs more than executing it:
about 2 ms for a step's commit (an UPDATE of the run with its events, checkpoint and effect
outcomes riding along), against well under 1 ms for the round trip. So a statement is built
once per *shape* (what varies in its text: which columns a move sets, whether it is fenced)
with bind parameters in place of values, kept under its name and shape (``Shapes``), and
executed with a dict of values; SQLAlchemy (or ``models.driver``) then finds its compiled form
at once.

A write that rides along with a compare-and-set may be *guarded*: built against the rows the
compare-and-set returns, it writes only if that matched. Then the whole commit is one statement
that either happens or does not, and it can run as its own transaction (see
``models.db.transaction(autocommit=True)``).
"""

from __future__ import annotations

import inspect
import re
import threading
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sqlalchemy import Select, Table, bindparam, exists, literal_column, select
from sqlalchemy.sql import FromClause, Insert, Update
from sqlalchemy.sql.elements import BindParameter

# Shapes are few (a handful per statement); the bound only guards against a caller that would
# make a new shape per call.
MAX_SHAPES = 1024
# The bind parameters of a write sent on its own are named with this prefix (a parameter named
# as its column is reserved in VALUES/SET); several writes in one statement get one each.
ALONE = "s_"
# What a statement may be named: a family and a verb, ``run.claim_at_once``.
NAME = re.compile(r"[a-z][a-z_]*\.[a-z][a-z_]*")


@dataclass(frozen=True, eq=False)
class Statement:
    """One statement the engine sends: its name, and how to build it for a dialect and a shape.

    A query's builder is ``build(dialect, *shape)``; a write's (``ride=True``, an INSERT or
    UPDATE that may ride along another statement) is ``build(dialect, prefix, guard, *shape)``,
    its bind parameters named ``prefix + name`` and, given a ``guard`` (the rows of another
    write in the same statement), writing only if the guard has a row. ``shapes`` are the
    shapes the reference shows it in; ``only`` names the one dialect that sends it, if one.
    """

    name: str
    build: Callable[..., Any]
    doc: str
    shapes: tuple[tuple[Any, ...], ...]
    ride: bool
    only: str | None
    module: str

    def __repr__(self) -> str:
        return f"<statement {self.name}>"


class DuplicateStatementError(ValueError):
    """Two statements registered under one name (they would share one built statement)."""


class Registry:
    """Statements by name; a name registered twice raises at once (at import)."""

    def __init__(self) -> None:
        self._by_name: dict[str, Statement] = {}

    def register(
        self,
        name: str,
        *,
        shapes: tuple[tuple[Any, ...], ...] = ((),),
        ride: bool = False,
        only: str | None = None,
    ) -> Callable[[Callable[..., Any]], Statement]:
        """Register the decorated builder under ``name`` (its docstring's first paragraph is
        the statement's description, and must say who sends it)."""
        if not NAME.fullmatch(name):
            raise ValueError(f"statement name {name!r} is not 'family.verb'")

        def decorate(build: Callable[..., Any]) -> Statement:
            if name in self._by_name:
                first = self._by_name[name]
                raise DuplicateStatementError(
                    f"statement {name!r} registered twice: {first.module}.{first.build.__name__}"
                    f" and {build.__module__}.{build.__name__}"
                )
            doc = inspect.getdoc(build)
            if not doc:
                raise ValueError(f"statement {name!r} has no docstring to describe it")
            found = Statement(
                name=name,
                build=build,
                doc=" ".join(doc.split("\n\n")[0].split()),
                shapes=shapes,
                ride=ride,
                only=only,
                module=build.__module__,
            )
            self._by_name[name] = found
            return found

        return decorate

    def __getitem__(self, name: str) -> Statement:
        return self._by_name[name]

    def __iter__(self) -> Iterator[Statement]:
        return iter(sorted(self._by_name.values(), key=lambda s: s.name))

    def __len__(self) -> int:
        return len(self._by_name)


# The engine's statements (the stores register theirs as they are imported).
STATEMENTS = Registry()
named = STATEMENTS.register


@dataclass(frozen=True)
class Write:
    """One INSERT or UPDATE: its statement (``ride=True``), its shape and its values.

    Its text may depend on the shape only, never on the values, which are ``params`` (by name,
    without the prefix the statement gives them).
    """

    statement: Statement
    shape: tuple[Any, ...]
    params: dict[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, tuple[Any, ...]]:
        return (self.statement.name, self.shape)

    def build(self, dialect: Any, prefix: str, guard: FromClause | None) -> Any:
        return self.statement.build(dialect, prefix, guard, *self.shape)

    def bound(self, prefix: str) -> dict[str, Any]:
        return {prefix + name: value for name, value in self.params.items()}


class Shapes:
    """Built statements by key (a name and a shape), built on first use (thread-safe; a race
    builds one twice). Names are unique (``Registry``), so no two statements share a key."""

    def __init__(self) -> None:
        # What is built, by key: read it directly on the hot path (no call, no closure made).
        self.kept: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable, build: Callable[[], Any]) -> Any:
        found = self.kept.get(key)
        if found is None:
            found = build()
            with self._lock:
                if len(self.kept) >= MAX_SHAPES:
                    self.kept.clear()
                self.kept[key] = found
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


U = TypeVar("U", Update, Select[Any])


def only_if(statement: U, guard: FromClause | None) -> U:
    """``statement`` (an UPDATE, or a query) restricted to when ``guard`` has a row."""
    if guard is None:
        return statement
    return statement.where(exists(select(literal_column("1")).select_from(guard)))
