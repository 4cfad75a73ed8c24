"""interrupts a sweep could not handle are put off (put_off_until)

Revision ID: interrupt_put_off_until
Revises: actor_kinds
Create Date: 2026-12-03 14:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "interrupt_put_off_until"
down_revision = "actor_kinds"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: on PostgreSQL a change of the catalog only, whatever the table's
    # size; and workers of the previous release, still running during a rolling deployment,
    # go on inserting interrupts (NULL: not put off).
    with op.batch_alter_table("interrupts") as batch:
        batch.add_column(sa.Column("put_off_until", sa.DateTime(timezone=True), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("interrupts") as batch:
        batch.drop_column("put_off_until")
