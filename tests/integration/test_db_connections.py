"""Pooled connections that the server closed: pinged after idling, tried again when in use.

The hot path pings no connection it just used (a ping is a round trip and, on PostgreSQL, a
transaction of its own); these tests kill the server side of a pooled connection and show that
interlude still gets through.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from models import dialects
from models.db import (
    dispose_engines,
    get_engine,
    once_more_if_disconnected,
    open_pool,
    transaction,
)
from models.kept import keep_connections
from models.settings import reset_settings


@pytest.fixture()
def pg(db: str, backend: str) -> str:
    if backend != "postgresql":
        pytest.skip("SQLite has no server to close a connection")
    # A pool of one connection, so that the next transaction is sure to take the closed one.
    dispose_engines()
    return db


def _pooled_backend_pid(url: str) -> int:
    """Use one connection and put it back in the pool; the server's pid for it."""
    with get_engine(url).connect() as conn:
        return int(conn.execute(text("SELECT pg_backend_pid()")).scalar_one())


def _terminate(url: str, pid: int) -> None:
    # From a connection outside interlude's pool, as an operator or a server restart would.
    admin = dialects.dialect_for(url).create(get_engine(url).url, 1)
    try:
        with admin.connect() as conn:
            assert conn.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid}).scalar_one()
    finally:
        admin.dispose()


def _select_one() -> int:
    with transaction() as session:
        return int(session.execute(text("SELECT 1")).scalar_one())


def test_a_connection_closed_while_idle_is_replaced_before_use(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a pooled connection whose server side was closed while it sat idle
    monkeypatch.setattr(dialects, "IDLE_PING_SECONDS", 0.0)
    closed = _pooled_backend_pid(pg)
    _terminate(pg, closed)
    # When the next transaction checks it out, Then the ping finds it dead and a new one is used
    assert _select_one() == 1
    assert _pooled_backend_pid(pg) != closed


def test_a_connection_in_steady_use_is_not_pinged(pg: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a connection used a moment ago (well within the idle time) and closed since
    monkeypatch.setattr(dialects, "IDLE_PING_SECONDS", 3600.0)
    _terminate(pg, _pooled_backend_pid(pg))
    # Then the next transaction meets the closed connection: it was not pinged first
    with pytest.raises(DBAPIError) as failed:
        _select_one()
    assert failed.value.connection_invalidated
    # And the one after it gets a new connection
    assert _select_one() == 1


def test_work_safe_to_repeat_goes_through_a_closed_connection(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dialects, "IDLE_PING_SECONDS", 3600.0)
    _terminate(pg, _pooled_backend_pid(pg))
    tries: list[int] = []

    def work() -> int:
        tries.append(1)
        return _select_one()

    # When repeatable work meets the closed connection, Then its second try succeeds
    assert once_more_if_disconnected(work) == 1
    assert len(tries) == 2


def test_other_database_errors_are_not_tried_again(db: str) -> None:
    tries: list[int] = []

    def work() -> None:
        tries.append(1)
        with transaction() as session:
            session.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(DBAPIError):
        once_more_if_disconnected(work)
    assert len(tries) == 1


def test_a_worker_opens_its_connections_before_its_first_step(db: str) -> None:
    # A threads-pool worker holds a connection ready for each step it may run at once.
    dispose_engines()
    assert open_pool(3) == 3
    # The steps then take those connections: none is opened for them.
    _waiting_and_taken(db, 3, lambda: transaction(readonly=True))


def test_a_pool_child_connects_before_its_first_step(db: str) -> None:
    from worker.engine.tasks import _keep_connection_in_child

    # Given a prefork pool child just forked (no engine, no connection yet)
    dispose_engines()
    try:
        # When the worker's process-init hook runs in it
        _keep_connection_in_child()
        # Then one connection is open and waiting in the pool, and the child's first step
        # (a single-statement transaction) takes it: none is opened for it
        _waiting_and_taken(db, 1, lambda: transaction(autocommit=True))
    finally:
        keep_connections(False)
        dispose_engines()


def _waiting_and_taken(
    db: str, connections: int, step: Callable[[], AbstractContextManager[Any]]
) -> None:
    """``connections`` wait open in the pool, and a ``step`` transaction opens none."""
    pool = get_engine(db).pool
    assert pool.checkedin() == connections  # type: ignore[attr-defined]
    assert pool.checkedout() == 0  # type: ignore[attr-defined]
    opened: list[object] = []
    event.listen(get_engine(db), "connect", lambda *_: opened.append(1))
    with step() as scope:
        scope.execute(text("SELECT 1"))
    assert opened == []


def test_an_unreachable_database_does_not_stop_a_worker_from_starting(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", "postgresql+psycopg://nobody@127.0.0.1:1/none")
    reset_settings()
    try:
        assert open_pool(3) == 0
    finally:
        monkeypatch.undo()
        reset_settings()
        dispose_engines()


def test_transient_database_errors_are_told_from_mistakes(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from models.db_errors import is_transient

    def raised(sql: str, url: str | None = None) -> DBAPIError:
        engine = get_engine(url)
        with pytest.raises(DBAPIError) as failed, engine.connect() as conn:
            conn.execute(text(sql))
        return failed.value

    # A connection the server closed (a restart, an administrator), a serialization failure,
    # a deadlock, a server starting up, a server not there: another try may go through
    monkeypatch.setattr(dialects, "IDLE_PING_SECONDS", 3600.0)
    _terminate(pg, _pooled_backend_pid(pg))
    assert is_transient(raised("SELECT 1"))
    for state in ("40001", "40P01", "57P03"):
        assert is_transient(
            raised(f"DO $$ BEGIN RAISE EXCEPTION USING ERRCODE = '{state}'; END $$")
        )
    nowhere = "postgresql+psycopg://postgres@127.0.0.1:1/none"
    assert is_transient(raised("SELECT 1", nowhere))
    # A mistake is not: another try would fail the same way
    assert not is_transient(raised("SELECT * FROM no_such_table"))
    assert not is_transient(raised("DO $$ BEGIN RAISE EXCEPTION 'mine'; END $$"))
    assert not is_transient(RuntimeError("not a database error"))


def test_work_is_tried_again_while_the_database_is_away_then_the_error_is_raised(db: str) -> None:
    from models.db import retrying

    tries: list[float] = []
    nowhere = "postgresql+psycopg://postgres@127.0.0.1:1/none"

    def work() -> None:
        tries.append(time.monotonic())
        with get_engine(nowhere).connect():
            pass

    began = time.monotonic()
    with pytest.raises(DBAPIError):
        retrying(work, within=0.5)
    # Several tries, spaced by growing waits, given up within the time allowed
    assert len(tries) >= 3
    assert time.monotonic() - began < 1.5
    # A mistake is raised at once
    mistakes: list[int] = []

    def mistake() -> None:
        mistakes.append(1)
        with transaction() as session:
            session.execute(text("SELECT * FROM no_such_table"))

    with pytest.raises(DBAPIError):
        retrying(mistake, within=5)
    assert mistakes == [1]
