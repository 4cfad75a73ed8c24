"""Count, inside one process, what it asks of the database through SQLAlchemy.

``install(role)`` adds engine-wide listeners (every engine of the process, made before or
after): statements (``before_cursor_execute``), commits and rollbacks, pool pre-pings, and the
server pid of every connection opened, so that the server's statement log can be split by
process. ``dump()`` writes the counts as JSON into ``$BENCH_COUNTS_DIR``. Only the counting
runs install it: the timed runs carry no listener. A statement that is its own transaction
runs on PostgreSQL without a session (``models/scope.py``), so SQLAlchemy sees no commit for
it: the server's count of transactions (``pg_stat_database``) is the one to read.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.engine.default import DefaultDialect
from sqlalchemy.pool import Pool

from bench.pg import kind_of

COUNTS_DIR_ENV = "BENCH_COUNTS_DIR"


@dataclass
class Counts:
    role: str
    pid: int
    statements: int = 0
    commits: int = 0
    rollbacks: int = 0
    pings: int = 0
    backend_pids: list[int] = field(default_factory=list)
    by_kind: Counter[str] = field(default_factory=Counter)
    # SQLAlchemy's compiled cache per statement: CACHE_HIT, CACHE_MISS (compiled again), ...
    cache: Counter[str] = field(default_factory=Counter)
    # Statements compiled at execution (no cache hit), by kind: where compilation time goes.
    compiled: Counter[str] = field(default_factory=Counter)

    def reset(self, role: str) -> None:
        self.role, self.pid = role, os.getpid()
        self.statements = self.commits = self.rollbacks = self.pings = 0
        self.by_kind.clear()
        self.cache.clear()
        self.compiled.clear()
        # Connections opened before a fork are not used by the child (they are forgotten).
        self.backend_pids.clear()


_counts: Counts | None = None


def counts() -> Counts:
    assert _counts is not None, "bench.counting.install() was not called"
    return _counts


def install(role: str) -> Counts:
    """Count this process's database work from now on (idempotent)."""
    global _counts
    if _counts is not None:
        _counts.reset(role)
        return _counts
    _counts = found = Counts(role=role, pid=os.getpid())

    def before_cursor_execute(
        conn: Connection, cursor: Any, statement: str, params: Any, context: Any, many: bool
    ) -> None:
        found.statements += 1
        found.by_kind[kind_of(statement)] += 1
        if getattr(context, "driver", False):
            # models.driver's statements: compiled once, executed on psycopg without an
            # execution context of SQLAlchemy's, so without a compiled-cache lookup.
            name = "DRIVER"
        else:
            status = getattr(context, "cache_hit", None)
            name = getattr(status, "name", str(status))
        found.cache[name] += 1
        if name not in ("CACHE_HIT", "DRIVER"):
            found.compiled[f"{kind_of(statement)} ({name})"] += 1

    def on_commit(conn: Connection) -> None:
        found.commits += 1

    def on_rollback(conn: Connection) -> None:
        found.rollbacks += 1

    def on_connect(dbapi_conn: Any, record: Any) -> None:
        info = getattr(dbapi_conn, "info", None)
        backend = getattr(info, "backend_pid", None)  # psycopg 3: known without a round trip
        if backend is not None:
            found.backend_pids.append(int(backend))

    event.listen(Engine, "before_cursor_execute", before_cursor_execute)
    event.listen(Engine, "commit", on_commit)
    event.listen(Engine, "rollback", on_rollback)
    event.listen(Pool, "connect", on_connect)

    # The pool's pre-ping runs below SQLAlchemy's statement events; count it where it happens.
    ping = DefaultDialect._do_ping_w_event

    def counted_ping(self: DefaultDialect, dbapi_connection: Any) -> bool:
        found.pings += 1
        return ping(self, dbapi_connection)

    DefaultDialect._do_ping_w_event = counted_ping  # type: ignore[method-assign]
    return found


def dump(directory: str | Path | None = None) -> Path | None:
    """Write this process's counts to ``<dir>/<role>-<pid>.json``; no directory, no file."""
    folder = directory or os.environ.get(COUNTS_DIR_ENV)
    if _counts is None or not folder:
        return None
    path = Path(folder) / f"{_counts.role}-{_counts.pid}.json"
    # Not dataclasses.asdict: it would rebuild the Counter from (key, value) pairs.
    found = {
        **vars(_counts),
        "by_kind": dict(_counts.by_kind),
        "cache": dict(_counts.cache),
        "compiled": dict(_counts.compiled),
    }
    path.write_text(json.dumps(found))
    return path


def load_all(directory: str | Path) -> list[dict[str, Any]]:
    return [json.loads(p.read_text()) for p in sorted(Path(directory).glob("*.json"))]
