"""A step thread keeps its autocommit connection from one single-statement transaction to the next.

Checking a connection out of SQLAlchemy's pool, switching it to autocommit, and checking it
back in (the pool's reset included) costs about 100 µs of CPU, half of what a step's
single-statement transaction costs in all (docs/explanation/performance.md, "A pool child
keeps its connection"). A worker's step threads run such transactions one after another (a
claim, a commit with the next claim, an effect's intent, the last commit), so a process that
runs steps opts in with ``keep_connections()`` and each of its threads then keeps its
connection between them.

Never more connections than without keeping: a thread keeps at most the one it would have
checked out anyway, and hands it back to the pool before any other transaction of that thread
(a session) takes one. It also goes back to the pool, to be reset or discarded there, when
- it sat unused for ``IDLE_PING_SECONDS`` (the pool pings such a one on its next checkout);
- a transaction on it raised;
- any connection of its engine was found disconnected (the pool then discards every
  connection opened before, and this one is treated the same way);
- the configured engine is another one (another database, or the engines were disposed).
A forked child never touches what its parent kept (the parent's sockets): it starts without.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from weakref import WeakKeyDictionary

from sqlalchemy import Connection, Engine, event

from models.dialects import IDLE_PING_SECONDS

_enabled = False
_lock = threading.Lock()
# Per engine: how many times one of its connections was found disconnected.
_disconnects: WeakKeyDictionary[Engine, list[int]] = WeakKeyDictionary()


class _Kept(threading.local):
    def __init__(self) -> None:
        self.connection: Connection | None = None
        # Its engine's disconnects counter (see _disconnects), and its value at checkout.
        self.disconnects: list[int] = [0]
        self.disconnects_seen = 0
        self.last_used = 0.0
        self.busy = False
        self.keeping = False  # this thread keeps its connection whatever the process does


_kept = _Kept()
# What a forked child inherited from the thread that forked: referenced for good, so that its
# finalizers never run in the child (they would reset a connection the parent still uses).
_inherited: list[_Kept] = []


def keep_connections(enabled: bool = True) -> None:
    """Let this process's threads keep their autocommit connection (a worker running steps)."""
    global _enabled
    _enabled = enabled
    if not enabled:
        release()


@contextmanager
def keeping() -> Iterator[None]:
    """This thread keeps its connection until the block ends, then hands it back to the pool
    (``worker.testing``'s ``drain`` runs steps in the caller's thread, as a pool child does)."""
    kept = _kept
    before, kept.keeping = kept.keeping, True
    try:
        yield
    finally:
        kept.keeping = before
        if not before and not _enabled:
            release()


def release() -> None:
    """Hand this thread's kept connection back to the pool (before it takes another)."""
    kept = _kept
    if kept.connection is not None and not kept.busy:
        _release(kept)


@contextmanager
def autocommit_connection(engine: Engine, options: dict[str, Any]) -> Iterator[Connection]:
    """A connection of ``engine`` set with ``options`` (autocommit), this thread's kept one if
    it may keep one; otherwise checked out for the block only, as without keeping."""
    kept = _kept
    if not (_enabled or kept.keeping) or kept.busy:  # (busy: a transaction inside another)
        with _connect(engine, options) as own:
            yield own
        return
    if kept.connection is not None and not _still_good(kept, engine):
        _release(kept)
    conn = kept.connection
    if conn is None:
        disconnects = _disconnects_of(engine)
        seen = disconnects[0]  # (read first: a disconnect meanwhile releases it)
        conn = kept.connection = _connect(engine, options)
        kept.disconnects, kept.disconnects_seen = disconnects, seen
    kept.busy = True
    try:
        yield conn
        if conn.in_transaction():  # (SQLAlchemy's own execution began one; nothing at the server)
            conn.rollback()
    except BaseException:
        _release(kept)
        raise
    finally:
        kept.busy = False
    kept.last_used = time.monotonic()


def _connect(engine: Engine, options: dict[str, Any]) -> Connection:
    conn = engine.connect()
    try:
        conn.execution_options(**options)
    except BaseException:
        conn.close()
        raise
    return conn


def _still_good(kept: _Kept, engine: Engine) -> bool:
    conn = kept.connection
    assert conn is not None
    return (
        conn.engine is engine
        and not conn.closed
        and not conn.invalidated
        and kept.disconnects[0] == kept.disconnects_seen
        and time.monotonic() - kept.last_used < IDLE_PING_SECONDS
    )


def _release(kept: _Kept) -> None:
    conn, kept.connection = kept.connection, None
    if conn is not None:
        conn.close()


def _disconnects_of(engine: Engine) -> list[int]:
    """How many times a connection of ``engine`` was found disconnected (counted from now)."""
    counter = _disconnects.get(engine)
    if counter is None:
        with _lock:
            counter = _disconnects.get(engine)
            if counter is None:
                counter = _disconnects[engine] = [0]
                event.listen(engine, "handle_error", _count_disconnect)
    return counter


def _count_disconnect(context: Any) -> None:
    if context.is_disconnect and context.engine is not None:
        counter = _disconnects.get(context.engine)
        if counter is not None:
            counter[0] += 1  # (a lost increment between threads only delays one release)


def _forget_after_fork() -> None:
    global _kept, _enabled
    _inherited.append(_kept)
    _kept = _Kept()
    _enabled = False


os.register_at_fork(after_in_child=_forget_after_fork)
