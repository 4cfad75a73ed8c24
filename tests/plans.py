"""A statement's plan as one text, on either backend, for tests that hold a read to an index."""

from __future__ import annotations

from typing import Any

from models.db import get_engine


def explain(statement: str, params: Any, *, sorting: bool = True) -> str:
    """The plan of ``statement`` on the test's database. On PostgreSQL the planner is kept from
    scanning a whole table (and from sorting, unless ``sorting``) wherever another plan exists,
    so that a small test table does not hide which index a large one would be read through."""
    engine = get_engine()
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            if not sorting:
                conn.exec_driver_sql("SET enable_sort = off")
            conn.exec_driver_sql("SET enable_seqscan = off")
            rows = conn.exec_driver_sql(f"EXPLAIN {statement}", params).all()
            conn.rollback()
        else:
            rows = conn.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", params).all()
    return "\n".join(str(row[-1]) for row in rows)
