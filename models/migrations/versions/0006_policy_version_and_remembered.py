"""interrupts record their policy version and ask group; checkpoints keep remembered values

Revision ID: policy_version_remembered
Revises: interrupt_put_off_until
Create Date: 2026-12-05 17:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "policy_version_remembered"
down_revision = "interrupt_put_off_until"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: catalog changes only on PostgreSQL, and workers of the previous
    # release keep inserting interrupts and checkpoints during a rolling deployment (NULL: no
    # policy declared, nothing remembered).
    with op.batch_alter_table("interrupts") as batch:
        batch.add_column(sa.Column("policy_version", sa.String(64), nullable=True))
        batch.add_column(sa.Column("ask_group", sa.String(200), nullable=True))
        batch.add_column(sa.Column("group_need", sa.Integer(), nullable=True))
    with op.batch_alter_table("checkpoints") as batch:
        batch.add_column(
            sa.Column(
                "remembered",
                sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
                nullable=True,
            )
        )


def downgrade() -> None:
    with op.batch_alter_table("checkpoints") as batch:
        batch.drop_column("remembered")
    with op.batch_alter_table("interrupts") as batch:
        batch.drop_column("group_need")
        batch.drop_column("ask_group")
        batch.drop_column("policy_version")
