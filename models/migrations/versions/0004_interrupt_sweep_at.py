"""interrupts carry when the expiry sweep looks at them next (sweep_at)

Revision ID: interrupt_sweep_at
Revises: actor_kinds
Create Date: 2026-12-03 14:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "interrupt_sweep_at"
down_revision = "actor_kinds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("interrupts") as batch:
        batch.add_column(sa.Column("sweep_at", sa.DateTime(timezone=True), nullable=True))
    # Every interrupt is due to be swept at its deadline, as the sweep read it before.
    op.execute(sa.text("UPDATE interrupts SET sweep_at = deadline"))
    with op.batch_alter_table("interrupts") as batch:
        batch.alter_column("sweep_at", existing_type=sa.DateTime(timezone=True), nullable=False)
        batch.drop_index(op.f("ix_interrupts_status_deadline"))
        batch.create_index(op.f("ix_interrupts_status_sweep_at"), ["status", "sweep_at"])


def downgrade() -> None:
    with op.batch_alter_table("interrupts") as batch:
        batch.drop_index(op.f("ix_interrupts_status_sweep_at"))
        batch.create_index(op.f("ix_interrupts_status_deadline"), ["status", "deadline"])
        batch.drop_column("sweep_at")
