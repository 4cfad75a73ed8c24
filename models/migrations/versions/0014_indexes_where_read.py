"""indexes hold only what is read through them: repeated-work events, forks; no attempt key

A write of a row that is not a HOT update (most writes of a run change its state, which is
indexed) adds an entry to every index of its table, whether the column is NULL or read at all.
Per W1 run that was seven entries for ``runs.forked_from`` (NULL but for a fork), nine for
``events.trigger`` (read only for the repeated-work totals) and one for
``resume_attempts.idempotency_key`` (never read alone: attempts are found by
``(actor_id, original_key)``). The first two become partial indexes over what their readers
ask for; the third goes (docs/explanation/performance.md, "Indexes only where read").

Revision ID: indexes_where_read
Revises: enum_columns_as_domains
Create Date: 2026-12-06 13:10:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "indexes_where_read"
down_revision = "enum_columns_as_domains"
branch_labels = None
depends_on = None

FORKED = sa.text("forked_from IS NOT NULL")
# (As models.tables.REPEATED_WORK_TRIGGERS says it today; written out, as a migration must.)
REPEATED_WORK = sa.text(
    "trigger IN ('step_reexecuted', 'effect_skipped', 'effect_reconciled', 'repair_raised')"
)


def upgrade() -> None:
    op.drop_index(op.f("ix_resume_attempts_idempotency_key"), table_name="resume_attempts")
    op.drop_index(op.f("ix_events_trigger"), table_name="events")
    op.create_index(
        "ix_events_repeated_work",
        "events",
        ["trigger"],
        unique=False,
        postgresql_where=REPEATED_WORK,
        sqlite_where=REPEATED_WORK,
    )
    op.drop_index(op.f("ix_runs_forked_from"), table_name="runs")
    op.create_index(
        op.f("ix_runs_forked_from"),
        "runs",
        ["forked_from"],
        unique=False,
        postgresql_where=FORKED,
        sqlite_where=FORKED,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_runs_forked_from"), table_name="runs")
    op.create_index(op.f("ix_runs_forked_from"), "runs", ["forked_from"], unique=False)
    op.drop_index("ix_events_repeated_work", table_name="events")
    op.create_index(op.f("ix_events_trigger"), "events", ["trigger"], unique=False)
    op.create_index(
        op.f("ix_resume_attempts_idempotency_key"),
        "resume_attempts",
        ["idempotency_key"],
        unique=False,
    )
