"""What differs between PostgreSQL and SQLite, in one place, chosen once per engine.

PostgreSQL serialises contenders with row locks (``FOR UPDATE``, ``SKIP LOCKED`` for sweeps);
SQLite has no row locks and serialises every writer with ``BEGIN IMMEDIATE`` instead, so its
strategy leaves queries as they are and prepares each connection for that.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Hashable, Mapping, Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import (
    JSON,
    BigInteger,
    DateTime,
    Engine,
    Integer,
    String,
    Table,
    Text,
    TypeDecorator,
    bindparam,
    cast,
    column,
    create_engine,
    event,
    func,
    insert,
    select,
    text,
    true,
)
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.dialects.postgresql import JSONB, psycopg
from sqlalchemy.engine import URL, CursorResult, make_url
from sqlalchemy.engine import Dialect as SQLDialect
from sqlalchemy.exc import DisconnectionError
from sqlalchemy.sql import FromClause, Insert, Select
from sqlalchemy.sql.dml import UpdateBase

from models import json_codec
from models.db_errors import NO_DATABASE_FILE
from models.driver import DriverStatement, NotForDriver
from models.errors import ConfigurationError
from models.scope import Scope
from models.statements import ALONE, Shapes, Statement, Write, insert_row, param

SQLITE_BUSY_TIMEOUT_MS = 30_000
# A pooled PostgreSQL connection unused for this long is pinged before it is handed out (a
# server restart or an idle timeout may have closed it meanwhile). One in steady use is not:
# a ping on every checkout is a round trip and a server transaction per transaction of ours.
IDLE_PING_SECONDS = 1.0
# Connecting to PostgreSQL gives up after this many seconds (libpq's ``connect_timeout``),
# unless the URL (``?connect_timeout=``) or PGCONNECT_TIMEOUT says otherwise. Without it a
# server that accepts the connection and never answers (a partition, a wedged host) holds a
# worker, `interlude stats|sweep|reap` and the metrics exporter for minutes (psycopg's own
# default is 130 s); 10 s is far above a healthy connect, even across regions.
CONNECT_TIMEOUT_SECONDS = 10
# TCP keepalives on PostgreSQL connections (libpq's parameters, each unless the URL gives it):
# probe after 30 s of silence, every 10 s, and drop the connection after 3 unanswered probes,
# so a server that vanished is noticed in about a minute rather than the system's two hours.
KEEPALIVES: dict[str, int] = {
    "keepalives": 1,
    "keepalives_idle": 30,
    "keepalives_interval": 10,
    "keepalives_count": 3,
}
# The session's time zone, UTC: psycopg then reads timestamps into ``datetime.UTC`` itself,
# which ``Timestamp`` passes on without converting them (the instants are the same in any
# zone, and nothing of interlude's SQL depends on the session's zone).
SESSION_OPTIONS = "-c TimeZone=UTC"
# In ``session.info`` of an autocommit transaction: how many writes it executed (at most one).
AUTOCOMMIT_WRITES = "interlude_autocommit_writes"

# Column types, the same tables on both: JSONB on PostgreSQL, JSON text on SQLite...
Json = JSON().with_variant(JSONB(), "postgresql")
# ...and SQLite only autoincrements INTEGER PRIMARY KEY; PostgreSQL gets a 64-bit sequence.
BigId = BigInteger().with_variant(Integer(), "sqlite")


def sql_values(enum: type[Enum]) -> str:
    """The values of ``enum`` as an SQL list: ``'a', 'b'``."""
    return ", ".join(f"'{member.value}'" for member in enum)


def enum_type(enum: type[Enum], length: int, table: str, column: str) -> Any:
    """The type of column ``column`` of ``table``, which holds a value of ``enum``:
    ``VARCHAR(length)``, the values checked by the database.

    On PostgreSQL it is domain ``<table>_<column>`` (``CHECK (VALUE IN ...)``, constraint
    ``ck_<table>_<column>``); on SQLite the table carries the CHECK constraint
    (``models.tables.checked``). A table's CHECK constraint costs PostgreSQL a parse and a
    planning of its stored expression in every statement that writes the table, whether or not
    it writes the column: about 1.0 M instructions a W1 run, an eighth of what the server
    executes for it (docs/explanation/performance.md, "Enum columns as domains"). A domain's
    check is parsed once per connection and runs only on the values written to its column.
    """
    checked = postgresql.DOMAIN(
        f"{table}_{column}",
        String(length),
        check=text(f"VALUE IN ({sql_values(enum)})"),
        constraint_name=f"ck_{table}_{column}",
    )
    return String(length).with_variant(checked, "postgresql")


class Timestamp(TypeDecorator[datetime]):
    """Aware UTC datetimes on every backend (SQLite stores naive UTC text and sorts it right)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: SQLDialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is UTC and dialect.name != "sqlite":
            return value  # (``utcnow()``'s: most of what is written; no conversion to make)
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: SQLDialect) -> datetime | None:
        if value is None or value.tzinfo is UTC:  # (PostgreSQL's, in its session's zone)
            return value
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


S = TypeVar("S", bound=Select[*tuple[Any, ...]])


class Dialect:
    """The PostgreSQL strategy; SQLite overrides what it does differently."""

    name = "postgresql"
    # A connection's options for ``transaction(autocommit=True)`` and read-only transactions:
    # each statement commits on its own, saving the BEGIN and COMMIT round trips.
    autocommit_options: dict[str, Any] = {"isolation_level": "AUTOCOMMIT"}
    # Whether a claim can be one data-modifying statement (``models.claims.claim_at_once``).
    claims_in_one_statement = True
    # Whether the runs a sweep ends and the interrupts it escalates are one statement for
    # many (``models.endings``, ``models.successors``) rather than one each.
    sweep_writes_at_once = True
    # Whether ``transaction(autocommit=True)`` runs on a bare connection (``models.scope``).
    autocommits_without_session = True

    def __init__(self) -> None:
        self.shapes = Shapes()  # as SQLAlchemy builds them (``built``)
        self.prepared = Shapes()  # as they are executed (``run``): for psycopg, on PostgreSQL

    def built(self, statement: Statement, shape: tuple[Any, ...] = ()) -> Any:
        """``statement`` in ``shape`` as SQLAlchemy builds it for this dialect, built once:
        for what must run through the session (ORM rows, a lock with ``readable_rows``)."""
        key = (statement.name, shape)
        found = self.shapes.kept.get(key)
        if found is None:
            found = self.shapes.get(key, lambda: statement.build(self, *shape))
        return found

    def run(
        self, session: Scope, statement: Statement, shape: tuple[Any, ...], params: dict[str, Any]
    ) -> Any:
        """``statement`` in ``shape`` (built on first use) executed with ``params``.

        On psycopg, as compiled once for the driver (``models.driver``); a statement that
        cannot be (a list given at execution) runs through SQLAlchemy. Only for Core
        statements: the rows come back as tuples, not ORM objects.
        """
        key = (statement.name, shape)
        prepared = self.prepared.kept.get(key)
        if prepared is None:
            prepared = self._prepare(session, key, lambda: statement.build(self, *shape))
        if isinstance(prepared, DriverStatement):
            return prepared.execute(session, params)
        return session.execute(prepared, params)

    def _run(
        self, session: Scope, key: Hashable, build: Callable[[], Any], params: dict[str, Any]
    ) -> Any:
        """The statement kept under ``key`` (``build()`` on first use) executed with ``params``
        (a write alone, or several in one statement)."""
        prepared = self.prepared.kept.get(key)
        if prepared is None:
            prepared = self._prepare(session, key, build)
        if isinstance(prepared, DriverStatement):
            return prepared.execute(session, params)
        return session.execute(prepared, params)

    def _prepare(self, session: Scope, key: Hashable, build: Callable[[], Any]) -> Any:
        """The statement of ``key`` as it is executed, built and kept on first use."""
        return self.prepared.get(key, lambda: _for_driver(build(), session))

    def compiler(self) -> SQLDialect:
        """SQLAlchemy's dialect for this database with named binds (``:name``), to read
        statements by (``models.sql_reference``): psycopg's, the driver we ship, whose
        statements carry the casts it sends."""
        return psycopg.dialect(paramstyle="named")  # type: ignore[no-untyped-call]

    def create(self, url: URL, pool_size: int, *, create: bool = False) -> Engine:
        """An engine for ``url``; ``create``: the database may be created (SQLite's file)."""
        if url.drivername in ("postgresql", "postgres"):
            # psycopg 3 is the driver we ship; plain postgresql:// would ask for psycopg2.
            url = url.set(drivername="postgresql+psycopg")
        # LIFO: the connection just returned is the next one handed out, so the ones in use
        # stay warm (never pinged) and the rest idle at the bottom of the pool.
        engine = create_engine(
            url,
            pool_size=pool_size,
            max_overflow=10,
            pool_use_lifo=True,
            connect_args=connect_args(url),
        )
        _ping_when_idle(engine)
        _quick_json(engine)
        return engine

    def exists(self, url: URL) -> bool:
        """Whether the database is there to connect to (a server's is, as far as we know)."""
        return True

    def lock(self, query: S, *, of: Any = None) -> S:
        """Rows (of ``of``, if given) this transaction is about to change: contenders queue
        behind it."""
        return query.with_for_update(of=of)

    def lock_or_skip(self, query: S) -> S:
        """Rows to work on unless another process holds them (sweeps, reapers): never wait."""
        return query.with_for_update(skip_locked=True)

    def lock_shared(self, query: S, *, of: Any = None) -> S:
        """Rows (of ``of``, if given) read to decide, that must not change before commit."""
        return query.with_for_update(read=True, of=of)

    def epoch_seconds(self, timestamp: Any) -> Any:
        """``timestamp`` (a ``Timestamp`` column) as seconds since 1970, a number in SQL."""
        return func.extract("epoch", timestamp)

    def insert_unless_present(self, table: Table, *key: str) -> Insert:
        """An INSERT that writes nothing (no error) when ``key`` is already taken."""
        return postgresql.insert(table).on_conflict_do_nothing(index_elements=list(key))

    def insert_rows(
        self, statement: Statement, common: dict[str, Any], rows: Sequence[dict[str, Any]]
    ) -> list[Write]:
        """The writes of ``statement`` (built by ``rows_insert``) inserting ``rows``, in their
        order, each with the ``common`` values: one statement whatever the number of rows,
        the rows travelling as one JSON parameter (a multi-row VALUES would be compiled
        again at every execution). The values of ``rows`` must be JSON."""
        if not rows:
            return []
        return [Write(statement, (tuple(common), tuple(rows[0])), {**common, "rows": list(rows)})]

    def rows_insert(
        self,
        table: Table,
        prefix: str,
        guard: FromClause | None,
        common: tuple[str, ...],
        keys: tuple[str, ...],
    ) -> UpdateBase:
        """The INSERT of ``insert_rows``: ``common`` columns from parameters, ``keys`` (text
        or JSON columns) from each row of parameter ``rows``, ids in the rows' order.

        In the rows' order without an ``ORDER BY``: ``jsonb_to_recordset`` yields a list's
        elements in order, a join ``ON true`` (the guard: one row or none) can only be a nested
        loop, which keeps that order whichever side it reads first, and a data-modifying
        statement is never planned in parallel. The sort that said so cost the server 2.4 % of
        a W1 run's instructions (a sort's set-up, in each of a run's seven writes of events);
        ``tests/integration/test_event_order.py`` holds the order.
        """
        columns = [
            column(k, JSONB() if isinstance(table.c[k].type, JSON) else Text()) for k in keys
        ]
        given = self.json_records(prefix + "rows", columns, f"{table.name}_given")
        fixed = [param(table, k, prefix + k) for k in common]
        query = select(*fixed, *(given.c[k] for k in keys))
        if guard is not None:  # (one row or none: the guard is a compare-and-set of one)
            query = query.select_from(given.join(guard, true()))
        return insert(table).from_select([*common, *keys], query)

    def json_records(
        self, name: str, columns: Sequence[Any], alias: str, *, as_text: bool = False
    ) -> FromClause:
        """Parameter ``name`` (a JSON list of objects) as a table of ``columns``, named
        ``alias``: one statement takes any number of rows. ``as_text``: the parameter is the
        list's JSON text, made once by the caller (nothing is serialized at execution)."""
        given = (
            cast(bindparam(name, type_=Text), JSONB) if as_text else bindparam(name, type_=JSONB)
        )
        return (
            func.jsonb_to_recordset(given)
            .table_valued(*columns)
            .render_derived(name=alias, with_types=True)
        )

    def seconds_after(self, timestamp: Any, seconds: Any) -> Any:
        """``timestamp`` plus ``seconds`` (a number in SQL), a timestamp."""
        return timestamp + func.make_interval(0, 0, 0, 0, 0, 0, seconds)

    def json_object(self, *pairs: Any) -> Any:
        """A JSON object built in SQL from ``key, value, key, value...``."""
        return func.jsonb_build_object(*pairs)

    def execute_with(self, session: Scope, statement: Write, writes: Sequence[Write]) -> Any:
        """``statement`` together with ``writes`` (inserts and updates of other tables).

        One statement, the writes riding along as data-modifying CTEs (they see the snapshot
        of ``statement``, not its effects). When ``statement`` returns rows (a compare-and-set
        ``UPDATE ... RETURNING``), the writes are guarded on them: if it matched nothing,
        nothing at all is written, so the statement may be its own transaction. Its rows are
        what the result returns.
        """
        return self._with(session, statement, writes, None)

    def execute_chain(
        self,
        session: Scope,
        statement: Write,
        writes: Sequence[Write],
        then: Write,
        *,
        given: Write | None = None,
    ) -> tuple[Any, Any]:
        """``execute_with``, and ``then`` at the end of the chain, in the same statement:
        guarded on the rows of the last of ``writes`` (a compare-and-set returning its row),
        so it writes only if ``statement`` and that write both matched. ``given``: a query
        (locking the rows it returns) that ``statement`` itself is guarded on, ahead of it.

        Returns ``statement``'s first row (None: it matched nothing, and nothing was written)
        and the first column of the row ``then`` returned (None: it wrote nothing, while
        ``statement`` and the other writes did: only a rollback takes them back).
        """
        if not writes:
            raise ValueError("a chain needs a write for its last link to be guarded on")
        row = self._with(session, statement, writes, then, given).first()
        return (None, None) if row is None else (row, row[-1])

    def _with(
        self,
        session: Scope,
        statement: Write,
        writes: Sequence[Write],
        then: Write | None,
        given: Write | None = None,
    ) -> Any:
        count_write(session)
        key: tuple[Any, ...] = ("with", statement.key, tuple(w.key for w in writes))
        if then is not None:
            key += (then.key,)
        if given is not None:
            key += ("given", given.key)

        params = statement.bound("m_")
        for i, write in enumerate(writes):
            params.update(write.bound(f"w{i}_"))
        if then is not None:
            params.update(then.bound("t_"))
        if given is not None:
            params.update(given.bound("g_"))
        return self._run(session, key, lambda: self.compose(statement, writes, then, given), params)

    def compose(
        self,
        statement: Write,
        writes: Sequence[Write],
        then: Write | None,
        given: Write | None = None,
    ) -> Any:
        """The one statement of ``execute_with`` / ``execute_chain``: ``writes`` (and ``then``)
        as data-modifying CTEs of ``statement``, guarded on its rows if it returns any, and
        ``statement`` guarded on ``given``'s rows, if given."""
        ahead = [] if given is None else [given.build(self, "g_", None).cte("g")]
        main = statement.build(self, "m_", ahead[0] if ahead else None)
        if not writes and not ahead:
            return main
        if not len(main.exported_columns):  # nothing to guard on (a plain INSERT)
            if then is not None or ahead:
                raise ValueError("a chain starts with a compare-and-set returning its row")
            return main.add_cte(
                *(w.build(self, f"w{i}_", None).cte(f"w{i}") for i, w in enumerate(writes))
            )
        moved = main.cte("m")
        guarded = [w.build(self, f"w{i}_", moved).cte(f"w{i}") for i, w in enumerate(writes)]
        guarded[:0] = ahead
        columns: list[Any] = list(moved.c)
        if then is not None:
            last = then.build(self, "t_", guarded[-1]).cte("t")
            guarded.append(last)
            columns.append(select(*last.c).scalar_subquery().label("then"))
        return select(*columns).add_cte(*guarded)

    def execute(self, session: Scope, write: Write) -> Any:
        """One write on its own, its statement built once for its shape."""
        count_write(session)
        return self._execute_one(session, write)

    def _execute_one(self, session: Scope, write: Write) -> Any:
        return self._run(
            session, write.key, lambda: write.build(self, ALONE, None), write.bound(ALONE)
        )


def connect_args(url: URL, environ: Mapping[str, str] = os.environ) -> dict[str, Any]:
    """libpq parameters for a PostgreSQL engine: a connect timeout, TCP keepalives and the
    session's time zone, each one only where the URL (or, for the timeout and the options,
    PGCONNECT_TIMEOUT and PGOPTIONS) does not set it."""
    given = set(url.query)
    if "PGCONNECT_TIMEOUT" in environ:
        given.add("connect_timeout")
    if "PGOPTIONS" in environ:
        given.add("options")
    wanted = {"connect_timeout": CONNECT_TIMEOUT_SECONDS, **KEEPALIVES, "options": SESSION_OPTIONS}
    return {key: value for key, value in wanted.items() if key not in given}


def _for_driver(statement: Any, session: Scope) -> Any:
    """``statement`` compiled for psycopg, or as it is if it cannot be (SQLAlchemy runs it)."""
    try:
        return DriverStatement(statement, session.get_bind().dialect)
    except NotForDriver:
        return statement


def count_write(session: Scope) -> None:
    """An autocommit session may write once: a second write would not be atomic with it."""
    written = session.info.get(AUTOCOMMIT_WRITES)
    if written is None:
        return
    if written:
        raise RuntimeError("a second write in a transaction(autocommit=True): use a transaction")
    session.info[AUTOCOMMIT_WRITES] = 1


class SQLiteDialect(Dialect):
    name = "sqlite"

    # In-process, a transaction costs no round trip: an autocommit transaction is a plain one
    # (a write still holds the write lock from BEGIN IMMEDIATE).
    autocommit_options: dict[str, Any] = {}
    # (No data-modifying CTEs; in-process, the claim's read and write cost no round trip.)
    claims_in_one_statement = False
    sweep_writes_at_once = False
    autocommits_without_session = False  # its writes take the lock in BEGIN IMMEDIATE

    # In-process, SQLAlchemy's own execution is what there is to save little against.
    def _prepare(self, session: Scope, key: Hashable, build: Callable[[], Any]) -> Any:
        return self.prepared.get(key, build)

    def compiler(self) -> SQLDialect:
        return sqlite.dialect(paramstyle="named")

    def create(self, url: URL, pool_size: int, *, create: bool = False) -> Engine:
        on_disk = bool(url.database) and url.database != ":memory:"
        if on_disk and create:
            Path(str(url.database)).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _serialise_writers(engine)
        if on_disk and not create:
            _open_existing_only(engine)
        return engine

    def exists(self, url: URL) -> bool:
        if not url.database or url.database == ":memory:" or url.query.get("uri"):
            return True
        return Path(url.database).exists()

    # Every write transaction already holds the database's single write lock from BEGIN.
    def lock(self, query: S, *, of: Any = None) -> S:
        return query

    def lock_or_skip(self, query: S) -> S:
        return query

    def lock_shared(self, query: S, *, of: Any = None) -> S:
        return query

    def epoch_seconds(self, timestamp: Any) -> Any:
        # Stored as naive UTC text, which julianday() reads; 2440587.5 is 1970-01-01's day.
        return (func.julianday(timestamp) - 2440587.5) * 86400.0

    def insert_unless_present(self, table: Table, *key: str) -> Insert:
        return sqlite.insert(table).on_conflict_do_nothing(index_elements=list(key))

    # In-process: one single-row INSERT per row, executed in order.
    def insert_rows(
        self, statement: Statement, common: dict[str, Any], rows: Sequence[dict[str, Any]]
    ) -> list[Write]:
        if not rows:
            return []
        shape = (tuple(common), tuple(rows[0]))
        return [Write(statement, shape, {**common, **row}) for row in rows]

    def rows_insert(
        self,
        table: Table,
        prefix: str,
        guard: FromClause | None,
        common: tuple[str, ...],
        keys: tuple[str, ...],
    ) -> UpdateBase:
        return insert_row(insert(table), table, (*common, *keys), prefix, guard)

    # Only the one-statement claim uses these, and SQLite claims the long way.
    def json_records(
        self, name: str, columns: Sequence[Any], alias: str, *, as_text: bool = False
    ) -> FromClause:
        raise NotImplementedError("json_records: PostgreSQL only (SQLite claims the long way)")

    def seconds_after(self, timestamp: Any, seconds: Any) -> Any:
        raise NotImplementedError("seconds_after: PostgreSQL only (SQLite claims the long way)")

    def json_object(self, *pairs: Any) -> Any:
        raise NotImplementedError("json_object: PostgreSQL only (SQLite claims the long way)")

    # SQLite has no data-modifying CTEs; it is in-process, so a round trip costs little.
    def execute_chain(
        self,
        session: Scope,
        statement: Write,
        writes: Sequence[Write],
        then: Write,
        *,
        given: Write | None = None,
    ) -> tuple[Any, Any]:
        if not writes:
            raise ValueError("a chain needs a write for its last link to be guarded on")
        count_write(session)  # (one write as far as atomicity goes: it is one transaction)
        if given is not None and self._execute_one(session, given).first() is None:
            return None, None
        row = self._execute_one(session, statement).first()
        if row is None:
            return None, None
        for write in writes[:-1]:
            self._execute_one(session, write)
        if not self._execute_one(session, writes[-1]).all():
            return row, None
        recorded = self._execute_one(session, then).first()
        return row, None if recorded is None else recorded[0]

    def execute_with(self, session: Scope, statement: Write, writes: Sequence[Write]) -> Any:
        # The statement first (the writes may refer to the row it inserts), and the writes
        # only if it changed something: what the guard does on PostgreSQL.
        count_write(session)  # (one write as far as atomicity goes: it is one transaction)
        result = self._execute_one(session, statement)
        if isinstance(result, CursorResult) and result.returns_rows:
            kept = result.freeze()
            if kept.data:
                for write in writes:
                    self._execute_one(session, write)
            return kept()
        if result.rowcount:
            for write in writes:
                self._execute_one(session, write)
        return result


def _ping_when_idle(engine: Engine) -> None:
    """Ping a connection on checkout only if it sat in the pool for ``IDLE_PING_SECONDS``.

    A connection that dies while in steady use fails its next transaction instead, and
    SQLAlchemy then discards every connection of the pool opened before the failure; the
    worker's claim tries once more on a fresh one (``models.db.once_more_if_disconnected``).
    """

    @event.listens_for(engine, "checkin")
    def _checked_in(_dbapi_conn: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _checked_out(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < IDLE_PING_SECONDS:
            return
        try:
            engine.dialect.do_ping(dbapi_conn)
        except Exception as error:
            # The pool discards this connection and checks out another (a new one if need be).
            raise DisconnectionError(f"stale pooled connection: {error}") from error


def _quick_json(engine: Engine) -> None:
    # Each connection reads and writes its JSON through models.json_codec (json's own output
    # and values, without json's per-call set-up: a few µs on each of a run's fifty values).
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        json_codec.install(dbapi_conn)


def _open_existing_only(engine: Engine) -> None:
    # sqlite3 creates a missing file on connect: a command that only reads (or a worker
    # started before `interlude db upgrade`) would leave an empty database, and its folders,
    # wherever a mistyped URL points. Only the schema's upgrade creates one (``create``).
    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: list[Any], cparams: dict[str, Any]) -> None:
        if cparams.get("uri"):  # the URL is already an SQLite URI: its own mode applies
            return
        path = Path(cargs[0])
        if not path.exists():
            raise sqlite3.OperationalError(f"{NO_DATABASE_FILE} {path.resolve()}")
        # Opened read-write only: if the file goes in the meantime, no new one is made.
        cargs[0] = f"{path.resolve().as_uri()}?mode=rw"
        cparams["uri"] = True


def _serialise_writers(engine: Engine) -> None:
    # pysqlite's own transaction handling would start transactions lazily and DEFERRED;
    # we take over so that every write transaction holds the write lock from its first read.
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn: Any, _record: Any) -> None:
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA journal_mode=WAL")
        cur.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cur.execute("PRAGMA foreign_keys=ON")
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn: Any) -> None:
        readonly = conn.get_execution_options().get("interlude_readonly", False)
        conn.exec_driver_sql("BEGIN" if readonly else "BEGIN IMMEDIATE")


def dialect_for(url: str | URL) -> Dialect:
    name = make_url(url).get_backend_name()
    if name == "sqlite":
        return SQLiteDialect()
    if name in ("postgresql", "postgres"):
        return Dialect()
    # Settings refuse such a URL first; this catches one given directly (``upgrade(url)``).
    raise ConfigurationError(
        detail=f"unsupported database {name!r}: use postgresql:// or sqlite://"
    )
