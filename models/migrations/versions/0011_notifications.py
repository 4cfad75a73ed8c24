"""the notification outbox (notifications): what each notifier is owed about an interrupt

Revision ID: notifications
Revises: runs_created_at
Create Date: 2026-12-05 19:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "notifications"
down_revision = "runs_created_at"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "notifications",
        sa.Column("interrupt_id", sa.String(length=32), nullable=False),
        sa.Column("notifier", sa.String(length=200), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("flow_name", sa.String(length=200), nullable=False),
        sa.Column("flow_version", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("due_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("done_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('owed', 'notified', 'skipped', 'failed')",
            name=op.f("ck_notifications_status"),
        ),
        sa.ForeignKeyConstraint(
            ["interrupt_id"],
            ["interrupts.id"],
            name=op.f("fk_notifications_interrupt_id_interrupts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("interrupt_id", "notifier", name=op.f("pk_notifications")),
    )
    op.create_index(
        op.f("ix_notifications_status_due_at"), "notifications", ["status", "due_at"], unique=False
    )
    op.create_index(op.f("ix_notifications_run_id"), "notifications", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_notifications_run_id"), table_name="notifications")
    op.drop_index(op.f("ix_notifications_status_due_at"), table_name="notifications")
    op.drop_table("notifications")
