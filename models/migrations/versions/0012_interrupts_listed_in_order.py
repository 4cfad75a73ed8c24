"""interrupts are listed oldest first through indexes on (created_at, id), all and pending

The index on run_id alone goes: the one on (run_id, checkpoint_id) serves its lookups.

Revision ID: interrupts_listed_in_order
Revises: notifications
Create Date: 2026-12-05 19:45:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "interrupts_listed_in_order"
down_revision = "notifications"
branch_labels = None
depends_on = None

PENDING = sa.text("status = 'pending'")


def upgrade() -> None:
    op.create_index(
        op.f("ix_interrupts_created_at_id"), "interrupts", ["created_at", "id"], unique=False
    )
    op.create_index(
        "ix_interrupts_pending_created_at_id",
        "interrupts",
        ["created_at", "id"],
        unique=False,
        postgresql_where=PENDING,
        sqlite_where=PENDING,
    )
    op.drop_index(op.f("ix_interrupts_run_id"), table_name="interrupts")


def downgrade() -> None:
    op.create_index(op.f("ix_interrupts_run_id"), "interrupts", ["run_id"], unique=False)
    op.drop_index("ix_interrupts_pending_created_at_id", table_name="interrupts")
    op.drop_index(op.f("ix_interrupts_created_at_id"), table_name="interrupts")
