"""checkpoints record when their step started; runs record the run they were forked from;
interrupts keep the trace context of the step that asked

Revision ID: step_timing_forks
Revises: kept_events
Create Date: 2026-12-05 18:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "step_timing_forks"
down_revision = "kept_events"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: catalog changes only, and the previous release keeps writing.
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
    with op.batch_alter_table("interrupts") as batch:
        batch.add_column(sa.Column("trace_parent", sa.String(64), nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("forked_from", sa.String(32), nullable=True))
        batch.add_column(sa.Column("forked_at", sa.Integer(), nullable=True))
    op.create_index(op.f("ix_runs_forked_from"), "runs", ["forked_from"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_forked_from"), table_name="runs")
    # Not in batch mode: SQLite's batch mode copies the table, and dropping the old runs table
    # would cascade to every row that refers to a run. Both databases drop a plain column.
    op.drop_column("runs", "forked_at")
    op.drop_column("runs", "forked_from")
    op.drop_column("interrupts", "trace_parent")
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("started_at")
