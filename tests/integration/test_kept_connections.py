"""A step thread keeps its autocommit connection between single-statement transactions.

On PostgreSQL a prefork pool child (and ``drain`` in tests) keeps the connection of its last
``transaction(autocommit=True)`` for the next one, instead of checking it out of the pool and
back each time (``models.kept``). These tests hold what makes that safe: never more
connections than without keeping, a session's transaction still atomic, and a kept connection
given back whenever the pool would have reset, pinged or discarded it. SQLite has no such
transaction (its autocommit transaction is a plain session), so they run on PostgreSQL only.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import DBAPIError

from models import events as event_store
from models import kept
from models.db import get_engine, once_more_if_disconnected, transaction
from models.enums import EventKind
from models.queries import events_of
from tests.services import PG_ADMIN_URL
from worker import enqueue_run
from worker.testing import TaskRecorder


@pytest.fixture()
def pg(db: str, backend: str) -> Iterator[str]:
    if backend != "postgresql":
        pytest.skip("SQLite's autocommit transaction is a plain session: nothing to keep")
    yield db
    kept.release()


def _backend_pid() -> int:
    """The server process of this thread's autocommit connection (kept or not)."""
    with transaction(autocommit=True) as scope:
        return int(scope.execute(text("select pg_backend_pid()")).scalar_one())


def _checked_out() -> int:
    return int(get_engine().pool.checkedout())  # type: ignore[attr-defined]


def _events(run_id: str) -> int:
    with transaction(readonly=True) as session:
        return len(events_of(session, run_id))


def _write_event(session: Any, run_id: str) -> None:
    event_store.record_event(session, run_id, actor="t", kind=EventKind.PAUSE_REQUESTED, detail={})


def test_a_keeping_thread_uses_one_connection_and_hands_it_back_at_the_end(pg: str) -> None:
    # Given a thread that keeps its connection (as a pool child does)
    with kept.keeping():
        # When it runs autocommit transactions one after another
        first = _backend_pid()
        # Then each runs on the same connection, which stays checked out between them
        assert _checked_out() == 1
        assert _backend_pid() == first
    # and once it stops keeping, the connection is back in the pool
    assert _checked_out() == 0


def test_without_keeping_each_transaction_returns_its_connection(pg: str) -> None:
    _backend_pid()
    assert _checked_out() == 0


def test_a_session_takes_the_kept_connection_back_first_and_stays_atomic(
    pg: str, tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("three_steps", {"n": 1})
    before = _events(run_id)
    with kept.keeping():
        # Given a kept connection, left in autocommit by a write
        with transaction(autocommit=True) as scope:
            _write_event(scope, run_id)
        # When a session's transaction in the same thread writes twice, then fails
        with pytest.raises(ZeroDivisionError), transaction() as session:
            _write_event(session, run_id)
            # Then it took no second connection: the kept one went back to the pool first
            assert _checked_out() == 1
            _write_event(session, run_id)
            _ = 1 / 0
    # and neither of its writes is there: its connection was transactional again
    assert _events(run_id) == before + 1


def test_a_transaction_that_raised_hands_its_kept_connection_back(pg: str) -> None:
    with kept.keeping():
        first = _backend_pid()
        with pytest.raises(ZeroDivisionError), transaction(autocommit=True):
            _ = 1 / 0
        # (back in the pool, which reset it: the next transaction checks it out again)
        assert _checked_out() == 0
        assert _backend_pid() == first  # (the pool is last in, first out)


def test_a_connection_kept_idle_too_long_goes_back_to_the_pool_to_be_pinged(
    pg: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    checkouts: list[int] = []
    engine = get_engine()
    listener = lambda *_: checkouts.append(1)  # noqa: E731
    event.listen(engine, "checkout", listener)
    try:
        with kept.keeping():
            _backend_pid()
            _backend_pid()
            assert len(checkouts) == 1  # kept in steady use
            monkeypatch.setattr(kept, "IDLE_PING_SECONDS", 0.0)
            _backend_pid()
            assert len(checkouts) == 2  # idle "too long": checked out (and pinged) again
    finally:
        event.remove(engine, "checkout", listener)


def _terminate(*pids: int) -> None:
    from sqlalchemy import create_engine

    admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as conn:
            for pid in pids:
                conn.execute(text("select pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        admin.dispose()


def test_once_one_kept_connection_is_found_dead_the_others_are_replaced_unused(pg: str) -> None:
    # Given two threads, each keeping a connection
    kept.keep_connections()
    other = ThreadPoolExecutor(max_workers=1)  # (one thread: it keeps its connection)
    try:
        mine, theirs = _backend_pid(), other.submit(_backend_pid).result()
        assert mine != theirs
        # When the server loses both (a restart), and this thread finds its own dead
        _terminate(mine, theirs)
        with pytest.raises(DBAPIError) as lost:
            _backend_pid()
        assert lost.value.connection_invalidated
        assert once_more_if_disconnected(_backend_pid) not in (mine, theirs)
        # Then the other thread's next transaction runs on a live connection at once: its
        # kept one was handed back to the pool, which discarded it, without being used
        assert other.submit(_backend_pid).result() not in (mine, theirs)
    finally:
        other.submit(kept.release).result()
        other.shutdown()
        kept.keep_connections(False)


def test_a_forked_child_never_uses_what_its_parent_kept(pg: str) -> None:
    with kept.keeping():
        parent = _backend_pid()
        read, write = os.pipe()
        child = os.fork()
        if child == 0:  # pragma: no cover (the child)
            code = 1
            try:
                os.write(write, str(_backend_pid()).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as pipe:
            seen = int(pipe.read() or 0)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        # Then the child ran on a connection of its own, and the parent's still works
        assert seen not in (0, parent)
        assert _backend_pid() == parent


def test_a_nested_autocommit_transaction_gets_a_connection_of_its_own(pg: str) -> None:
    with kept.keeping():
        outer = _backend_pid()
        with transaction(autocommit=True):
            assert _backend_pid() != outer
        assert _backend_pid() == outer


def test_drain_keeps_a_connection_while_it_runs_steps_and_hands_it_back(
    pg: str, tasks: TaskRecorder
) -> None:
    pids: set[int] = set()
    engine = get_engine()

    def seen(conn: Any, *_: Any) -> None:
        pids.add(conn.connection.driver_connection.info.backend_pid)

    event.listen(engine, "before_cursor_execute", seen)
    try:
        enqueue_run("three_steps", {"n": 1})
        tasks.drain()
    finally:
        event.remove(engine, "before_cursor_execute", seen)
    assert len(pids) == 1
    assert _checked_out() == 0
