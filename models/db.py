"""Engines and transactions; each engine gets its dialect strategy when it is created."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Literal, TypeVar, overload

from sqlalchemy import Engine, Select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session, sessionmaker

from models.db_errors import is_transient
from models.dialects import AUTOCOMMIT_WRITES, Dialect, dialect_for
from models.kept import autocommit_connection
from models.kept import release as release_kept
from models.scope import AutocommitScope, Scope
from models.settings import get_settings

DEFAULT_POOL_SIZE = 5
# Waits between tries of work that met a transient database error: doubled from the first up
# to the last, so that a server back after a restart (about a second) is found within moments.
FIRST_RETRY_WAIT = 0.05
LONGEST_RETRY_WAIT = 0.5
T = TypeVar("T")

_lock = threading.Lock()
# Set by a worker whose pool runs many steps at once in one process (threads).
_pool_size_for_workers: int | None = None
_engines: dict[str, Engine] = {}
_sessions: dict[str, sessionmaker[Session]] = {}
_dialects: dict[str, Dialect] = {}


# The instant POSIX time counts from (the inbox's cursors count microseconds since it).
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def utcnow() -> datetime:
    return datetime.now(UTC)


def make_engine(url: str, pool_size: int = DEFAULT_POOL_SIZE, *, create: bool = False) -> Engine:
    """An engine for ``url``; only ``create`` may make the database (SQLite's file) first."""
    return dialect_for(url).create(make_url(url), pool_size, create=create)


def database_exists(url: str) -> bool:
    """Whether ``url``'s database is there to connect to (an embedded one may not be yet)."""
    return dialect_for(url).exists(make_url(url))


def pool_size() -> int:
    return get_settings().db_pool_size or _pool_size_for_workers or DEFAULT_POOL_SIZE


def size_pool_for(concurrent_steps: int) -> None:
    """Keep a connection for each step this process may run at once (and the lease keeper).

    A threads-pool worker calls it at start: with fewer connections than threads, steps would
    queue for a connection instead of running side by side.
    """
    global _pool_size_for_workers
    _pool_size_for_workers = concurrent_steps + 2
    dispose_engines()


def open_pool(connections: int) -> int:
    """Open up to ``connections`` connections to the database now and keep them in the pool.

    A worker calls it before it takes its first task: a threads-pool worker for all its slots,
    or its first burst of steps (a full pool's worth, after every start or deployment) opens
    that many connections at once, each step waiting on the server's start-up of a backend;
    a prefork pool child for its one connection, or its first step waits for it. Returns how
    many it opened; a database that cannot be reached now is not an error (the steps will
    connect, or wait, when they run).
    """
    engine = get_engine()
    held = []
    try:
        for _ in range(min(connections, pool_size())):
            held.append(engine.connect())
    except DBAPIError:
        pass
    finally:
        for conn in held:
            conn.close()
    return len(held)


def get_engine(url: str | None = None) -> Engine:
    url = url or get_settings().database_url
    engine = _engines.get(url)  # the common case takes no lock
    if engine is not None:
        return engine
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            _dialects[url] = dialect_for(url)
            engine = _engines[url] = _dialects[url].create(make_url(url), pool_size())
            _sessions[url] = sessionmaker(engine, expire_on_commit=False)
        return engine


def _session_factory() -> tuple[sessionmaker[Session], Dialect]:
    url = get_settings().database_url
    if url not in _sessions:
        get_engine(url)
    return _sessions[url], _dialects[url]


@overload
def transaction(
    *, readonly: bool = False, autocommit: Literal[False] = False
) -> AbstractContextManager[Session]: ...


@overload
def transaction(*, readonly: bool = False, autocommit: bool) -> AbstractContextManager[Scope]: ...


@contextmanager
def transaction(*, readonly: bool = False, autocommit: bool = False) -> Iterator[Any]:
    """One transaction: commit on success, roll back on any exception.

    ``autocommit``: the work is at most one write (reads before it or after a failed one
    are fine), so each statement may commit on its own: on PostgreSQL that saves the
    ``BEGIN`` and ``COMMIT`` round trips, and the work runs on a pooled connection without
    an ORM session (``models.scope``), which a worker's step thread keeps for its next one
    (``models.kept``). A second write raises (it would not be atomic with
    the first), and so do ORM objects left to flush. A read-only transaction on PostgreSQL is
    autocommit too: under READ COMMITTED each statement sees its own snapshot anyway.
    """
    factory, strategy = _session_factory()
    if autocommit and not readonly and strategy.autocommits_without_session:
        with autocommit_connection(get_engine(), strategy.autocommit_options) as conn:
            yield AutocommitScope(conn, {"dialect": strategy, AUTOCOMMIT_WRITES: 0})
        return
    release_kept()  # (the session takes a connection of its own: at most one per thread)
    session = factory(info={"dialect": strategy})
    options: dict[str, Any] = {"interlude_readonly": True} if readonly else {}
    if autocommit or readonly:
        options.update(strategy.autocommit_options)
    if autocommit:
        session.info[AUTOCOMMIT_WRITES] = 0
    if options:
        session.connection(execution_options=options)
    try:
        yield session
        if autocommit and (session.new or session.dirty or session.deleted):
            raise RuntimeError("ORM changes to flush in a transaction(autocommit=True)")
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def autocommits_without_session() -> bool:
    """Whether ``transaction(autocommit=True)`` runs on a bare connection, each statement its
    own transaction (PostgreSQL), rather than in a session (SQLite)."""
    return bool(_session_factory()[1].autocommits_without_session)


def once_more_if_disconnected(work: Callable[[], T]) -> T:
    """``work()`` (its own transaction), tried once more if the connection turned out dead.

    Pooled connections are pinged only after sitting idle, so the first transaction after a
    database restart can meet a closed one; SQLAlchemy then drops the pool's connections and
    the second try gets a new connection. Only for work that is safe to repeat when its first
    commit might have landed (a compare-and-set claim, a read).
    """
    try:
        return work()
    except DBAPIError as exc:
        if not exc.connection_invalidated:
            raise
    return work()


def retrying(work: Callable[[], T], *, within: float) -> T:
    """``work()`` (its own transaction), tried again while it meets a transient database error
    (``models.db_errors.is_transient``: a lost connection, a restarting server, a
    serialization failure) and ``within`` seconds have not passed; then that error is raised.

    Only for work safe to repeat when its first commit might have landed (a compare-and-set).
    """
    deadline = time.monotonic() + within
    wait = FIRST_RETRY_WAIT
    while True:
        try:
            return work()
        except DBAPIError as exc:
            if not is_transient(exc) or time.monotonic() + wait > deadline:
                raise
        time.sleep(wait)
        wait = min(wait * 2, LONGEST_RETRY_WAIT)


def current_dialect() -> Dialect:
    """The strategy of the configured database's engine (created on first use)."""
    return _session_factory()[1]


def dialect(session: Scope) -> Dialect:
    """The strategy of the engine ``session`` works on (set by ``transaction``)."""
    strategy: Dialect = session.info["dialect"]
    return strategy


def dispose_engines(*, close: bool = True) -> None:
    """Drop pooled connections: closed when switching databases, only forgotten after fork."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=close)
        _engines.clear()
        _sessions.clear()
        _dialects.clear()


# A forked Celery pool child must not share its parent's sockets.
def _forget_after_fork() -> None:
    dispose_engines(close=False)


os.register_at_fork(after_in_child=_forget_after_fork)


def readable_rows(
    session: Session, query: Select[Any], params: dict[str, Any] | None = None
) -> tuple[list[Any], dict[str, str]]:
    """The ORM rows ``query`` selects with ``params`` (of one entity with an ``id``), and the
    ids of those it could not read, each with why.

    SQLite keeps JSON as text, which a hand edit can break; one such row must not stop a
    sweep or a reaper pass that meets it among others. Read at once, as usual; only if that
    fails, the ids again and then one row at a time. (Decoding happens in Python: the
    transaction is still good after the error.)
    """
    try:
        return list(session.execute(query, params).scalars()), {}
    except ValueError:  # json.JSONDecodeError, from a column's result processing
        pass
    entity = query.column_descriptions[0]["entity"]
    rows: list[Any] = []
    unreadable: dict[str, str] = {}
    for row_id in session.execute(query.with_only_columns(entity.id), params).scalars().all():
        try:
            rows.append(session.get(entity, row_id, populate_existing=True))
        except ValueError as exc:
            unreadable[row_id] = f"{type(exc).__name__}: {exc}"
    return rows, unreadable
