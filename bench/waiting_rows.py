"""The rows of a waiting run as the real path wrote them: read back, compared with copies.

``bench.w2`` and ``bench.scale`` take a run that the engine left waiting as a template, insert
copies of its rows in bulk, and check a copy against it here: the same columns and values but
for the ids and what the bench varies on purpose.
"""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import JSON, Column, Connection, Table, Text, cast, select

# A run's rows, table by table, each row a dict of its columns.
RunRows = dict[str, list[dict[str, Any]]]


def tables() -> dict[str, Table]:
    """The tables a waiting run has rows in, parents first (the others refer to ``runs``)."""
    from models.tables import Checkpoint, Event, Interrupt, Run

    return {
        "runs": Run.__table__,  # type: ignore[dict-item]
        "checkpoints": Checkpoint.__table__,  # type: ignore[dict-item]
        "interrupts": Interrupt.__table__,  # type: ignore[dict-item]
        "events": Event.__table__,  # type: ignore[dict-item]
    }


class SqlNull:
    """A JSON column holding SQL NULL (not JSON ``null``, which the real path writes too)."""

    def __repr__(self) -> str:
        return "SQL NULL"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SqlNull)

    def __hash__(self) -> int:
        return 0


SQL_NULL = SqlNull()


def is_json(column: Column[Any]) -> bool:
    return isinstance(column.type, JSON)


def rows_of_run(conn: Connection, run_id: str) -> RunRows:
    """Every row of run ``run_id`` in ``tables()``, events in order.

    JSON columns are read as their text, so that SQL NULL (``SQL_NULL``) and JSON ``null``
    (``None``) stay apart.
    """
    found: RunRows = {}
    for name, table in tables().items():
        key = table.c.id if name == "runs" else table.c.run_id
        order = table.c.seq if name == "checkpoints" else table.c.id
        shown = [cast(c, Text).label(c.name) if is_json(c) else c for c in table.c]
        rows = conn.execute(select(*shown).where(key == run_id).order_by(order)).mappings()
        found[name] = [
            {
                c.name: (SQL_NULL if row[c.name] is None else json.loads(row[c.name]))
                if is_json(c)
                else row[c.name]
                for c in table.c
            }
            for row in rows
        ]
    return found


def ids_of(rows: RunRows) -> list[str]:
    """The ids a run's rows name it and its checkpoints and interrupts by."""
    return [
        rows["runs"][0]["id"],
        *(r["id"] for n in ("checkpoints", "interrupts") for r in rows[n]),
    ]


def replaced(value: Any, ids: dict[str, str]) -> Any:
    """``value`` with every string that is one of the template's ids replaced by the new id."""
    if isinstance(value, str):
        return ids.get(value, value)
    if isinstance(value, dict):
        return {k: replaced(v, ids) for k, v in value.items()}
    if isinstance(value, list):
        return [replaced(v, ids) for v in value]
    return value


def check_copy(template: RunRows, copy: RunRows, varying: set[str]) -> None:
    """RuntimeError unless ``copy`` has the template's rows: the same columns and values but
    for the ids (and the events' own), and the columns named in ``varying``."""
    counts = {name: len(rows) for name, rows in copy.items()}
    if counts != {name: len(rows) for name, rows in template.items()}:
        raise RuntimeError(f"a bulk run has other rows than its template: {counts}")
    back = dict(zip(ids_of(copy), ids_of(template), strict=True))
    for name, originals in template.items():
        for original, row in zip(originals, copy[name], strict=True):
            differ = {
                k for k, v in replaced(row, back).items() if v != original[k] and k not in varying
            }
            if differ - ({"id"} if name == "events" else set()):
                raise RuntimeError(f"bulk {name} row differs from the real one in {differ}")
            if any(old in repr(row) for old in back.values()):
                raise RuntimeError(f"bulk {name} row names the template's ids: {row}")
