"""runs are listed newest first through an index on created_at

Revision ID: runs_created_at
Revises: answer_links
Create Date: 2026-12-05 18:20:00
"""

from __future__ import annotations

from alembic import op

revision = "runs_created_at"
down_revision = "answer_links"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index(op.f("ix_runs_created_at"), "runs", ["created_at"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_created_at"), table_name="runs")
