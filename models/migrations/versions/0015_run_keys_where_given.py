"""on PostgreSQL, only runs started with an idempotency key are in its unique index

A write of a run that is not a HOT update (most are: each transition changes the indexed
``state``) adds an entry to every index of ``runs``, NULL or not: seven entries per W1 run in
the unique index of ``idempotency_key``, which most runs leave NULL and no query reads as NULL
(docs/explanation/performance.md, "Run keys indexed where given"). The constraint becomes a
unique index over the keyed runs: a key still starts one run, and ``idempotency_key = :key``
still finds it through the index. SQLite keeps its UNIQUE constraint, which it cannot drop
without copying the table.

The index is built before the constraint is dropped, so that no moment of the upgrade lets a
key start a second run; building it locks the table's writes for as long as it takes.

Revision ID: run_keys_where_given
Revises: indexes_where_read
Create Date: 2026-12-06 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "run_keys_where_given"
down_revision = "indexes_where_read"
branch_labels = None
depends_on = None

KEYED = sa.text("idempotency_key IS NOT NULL")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index(
        op.f("ix_runs_idempotency_key"),
        "runs",
        ["idempotency_key"],
        unique=True,
        postgresql_where=KEYED,
    )
    op.drop_constraint(op.f("uq_runs_idempotency_key"), "runs", type_="unique")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_unique_constraint(op.f("uq_runs_idempotency_key"), "runs", ["idempotency_key"])
    op.drop_index(op.f("ix_runs_idempotency_key"), table_name="runs")
