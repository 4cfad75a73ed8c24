"""Engines and transactions. SQLite (embedded default) is serialised with BEGIN IMMEDIATE."""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from models.settings import get_settings

SQLITE_BUSY_TIMEOUT_MS = 30_000

_lock = threading.Lock()
_engines: dict[str, Engine] = {}
_sessions: dict[str, sessionmaker[Session]] = {}


def utcnow() -> datetime:
    return datetime.now(UTC)


def _prepare_sqlite(engine: Engine) -> None:
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


def make_engine(url: str) -> Engine:
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        if parsed.database and parsed.database != ":memory:":
            Path(parsed.database).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"timeout": SQLITE_BUSY_TIMEOUT_MS / 1000})
        _prepare_sqlite(engine)
        return engine
    if parsed.get_backend_name() == "postgresql" and parsed.drivername == "postgresql":
        # psycopg 3 is the driver we ship; plain postgresql:// would ask for psycopg2.
        url = parsed.set(drivername="postgresql+psycopg").render_as_string(hide_password=False)
    return create_engine(url, pool_pre_ping=True, pool_size=5, max_overflow=10)


def get_engine(url: str | None = None) -> Engine:
    url = url or get_settings().database_url
    with _lock:
        engine = _engines.get(url)
        if engine is None:
            engine = _engines[url] = make_engine(url)
            _sessions[url] = sessionmaker(engine, expire_on_commit=False)
        return engine


def _session_factory() -> sessionmaker[Session]:
    url = get_settings().database_url
    get_engine(url)
    return _sessions[url]


@contextmanager
def transaction(*, readonly: bool = False) -> Iterator[Session]:
    """One transaction: commit on success, roll back on any exception."""
    session = _session_factory()()
    if readonly:
        session.connection(execution_options={"interlude_readonly": True})
    try:
        yield session
        session.commit()
    except BaseException:
        session.rollback()
        raise
    finally:
        session.close()


def is_postgresql() -> bool:
    return get_engine().dialect.name == "postgresql"


def dispose_engines(*, close: bool = True) -> None:
    """Drop pooled connections: closed when switching databases, only forgotten after fork."""
    with _lock:
        for engine in _engines.values():
            engine.dispose(close=close)
        _engines.clear()
        _sessions.clear()


# A forked Celery pool child must not share its parent's sockets.
def _forget_after_fork() -> None:
    dispose_engines(close=False)


os.register_at_fork(after_in_child=_forget_after_fork)
