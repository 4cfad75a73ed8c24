"""events kept for runs not waiting on them yet (kept_events); resume outcome kept

Revision ID: kept_events
Revises: policy_version_remembered
Create Date: 2026-12-05 17:30:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "kept_events"
down_revision = "policy_version_remembered"
branch_labels = None
depends_on = None

OUTCOMES_BEFORE = (
    "'accepted', 'duplicate', 'malformed', 'unauthenticated', 'stale', 'expired', 'denied', "
    "'invalid_input', 'renewed_review_required', 'unknown_schema', 'key_reused'"
)
OUTCOMES = OUTCOMES_BEFORE + ", 'kept'"


def _outcomes(values: str) -> None:
    with op.batch_alter_table("resume_attempts") as batch:
        batch.drop_constraint(op.f("ck_resume_attempts_outcome"), type_="check")
        batch.create_check_constraint(op.f("ck_resume_attempts_outcome"), f"outcome IN ({values})")


def upgrade() -> None:
    op.create_table(
        "kept_events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("sender", sa.String(length=200), nullable=False),
        sa.Column("sender_kind", sa.String(length=16), nullable=False),
        sa.Column("arrived_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("consumed_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("interrupt_id", sa.String(length=32), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_kept_events_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_kept_events")),
    )
    op.create_index(
        op.f("ix_kept_events_run_id_name_consumed_at"),
        "kept_events",
        ["run_id", "name", "consumed_at"],
        unique=False,
    )
    _outcomes(OUTCOMES)


def downgrade() -> None:
    op.execute("DELETE FROM resume_attempts WHERE outcome = 'kept'")
    _outcomes(OUTCOMES_BEFORE)
    op.drop_index(op.f("ix_kept_events_run_id_name_consumed_at"), table_name="kept_events")
    op.drop_table("kept_events")
