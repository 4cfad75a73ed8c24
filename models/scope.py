"""What a write of one statement runs on: an ORM session, or on PostgreSQL a bare connection.

``models.db.transaction(autocommit=True)`` is the hot path's transaction: at most one write,
which commits on its own. On PostgreSQL it needs none of a session's machinery (its unit of
work, its transaction object, its identity map), and that machinery cost more CPU than the
statement it carried: about 0.2 ms a transaction, a fifth of what a W4 run's steps cost the
worker (docs/explanation/performance.md, "A statement without a session"). So there it
yields an ``AutocommitScope``, a pooled connection in autocommit with the session's ``info``,
and the stores that run in such a transaction take a ``Scope``: either. What it does not have
(``add``, ``get``, ORM queries) fails loudly instead of running without a session.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import Connection, Engine
from sqlalchemy.engine import CursorResult
from sqlalchemy.orm import Session
from sqlalchemy.sql import Executable


class AutocommitScope:
    """A pooled connection in autocommit, for one transaction(autocommit=True) on PostgreSQL.

    Core statements only: each commits as it runs, so the scope has nothing to commit or
    roll back; ``models.db.transaction`` returns the connection to the pool.
    """

    __slots__ = ("_connection", "info")

    def __init__(self, connection: Connection, info: dict[str, Any]) -> None:
        self._connection = connection
        self.info = info

    def connection(self) -> Connection:
        return self._connection

    def get_bind(self) -> Engine:
        return self._connection.engine

    def execute(self, statement: Executable, params: Any = None) -> CursorResult[Any]:
        return self._connection.execute(statement, params)


# What the stores' single-statement writes (and the claim) run on.
Scope = Session | AutocommitScope
