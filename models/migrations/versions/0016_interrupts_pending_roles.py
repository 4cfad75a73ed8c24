"""on PostgreSQL, the pending interrupts indexed by role (GIN), for the inbox

The inbox matches an actor's roles in the database (``roles ?| ...``) while it reads pending
interrupts oldest first through ``ix_interrupts_pending_created_at_id``. An actor whose roles
have few pending interrupts, or none, made it walk every pending one to find them (147 ms
beside a million); with this index the planner reads those few here and sorts them
(docs/explanation/performance.md, "The inbox's roles matched by the server"). SQLite has no
GIN index and keeps the walk.

Building it locks writes to ``interrupts`` for as long as it takes: 0.6 s for a million
pending interrupts on the project's machine, into 1.6 MB (a few roles, compressed lists).

Revision ID: interrupts_pending_roles
Revises: run_keys_where_given
Create Date: 2026-12-07 12:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "interrupts_pending_roles"
down_revision = "run_keys_where_given"
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.create_index(
        "ix_interrupts_pending_roles",
        "interrupts",
        ["roles"],
        unique=False,
        postgresql_using="gin",
        postgresql_with={"fastupdate": "off"},
        postgresql_where=PENDING,
    )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.drop_index("ix_interrupts_pending_roles", table_name="interrupts")
