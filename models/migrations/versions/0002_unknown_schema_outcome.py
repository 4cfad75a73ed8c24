"""resume outcome unknown_schema

Revision ID: v12_unknown_schema
Revises: 0001
Create Date: 2026-11-29 14:50:00
"""

from __future__ import annotations

from alembic import op

revision = "v12_unknown_schema"
down_revision = "0001"
branch_labels = None
depends_on = None

BEFORE = (
    "'accepted', 'duplicate', 'malformed', 'unauthenticated', 'stale', 'expired', 'denied', "
    "'invalid_input', 'renewed_review_required'"
)
AFTER = BEFORE + ", 'unknown_schema'"


def _outcomes(values: str) -> None:
    # Named CHECK constraints take part in SQLite's batch (copy) mode; PostgreSQL alters in place.
    with op.batch_alter_table("resume_attempts") as batch:
        batch.drop_constraint(op.f("ck_resume_attempts_outcome"), type_="check")
        batch.create_check_constraint(op.f("ck_resume_attempts_outcome"), f"outcome IN ({values})")


def upgrade() -> None:
    _outcomes(AFTER)


def downgrade() -> None:
    op.execute("DELETE FROM resume_attempts WHERE outcome = 'unknown_schema'")
    _outcomes(BEFORE)
