"""initial schema

Revision ID: 0001
Revises:
Create Date: 2026-11-29 07:56:28.471591
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:

    op.create_table(
        "actors",
        sa.Column("id", sa.String(length=200), nullable=False),
        sa.Column(
            "roles",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("credential_hash", sa.String(length=128), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_actors")),
    )
    op.create_table(
        "resume_attempts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("run_id", sa.String(length=200), nullable=True),
        sa.Column("interrupt_id", sa.String(length=200), nullable=True),
        sa.Column("actor_id", sa.String(length=200), nullable=True),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("original_key", sa.String(length=200), nullable=True),
        sa.Column("outcome", sa.String(length=32), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column(
            "payload",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.CheckConstraint(
            "outcome IN ('accepted', 'duplicate', 'malformed', 'unauthenticated', 'stale', 'expired', 'denied', 'invalid_input', 'renewed_review_required')",
            name=op.f("ck_resume_attempts_outcome"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_resume_attempts")),
        sa.UniqueConstraint("original_key", name=op.f("uq_resume_attempts_original_key")),
    )
    op.create_index(
        op.f("ix_resume_attempts_idempotency_key"),
        "resume_attempts",
        ["idempotency_key"],
        unique=False,
    )
    op.create_index(
        op.f("ix_resume_attempts_interrupt_id"), "resume_attempts", ["interrupt_id"], unique=False
    )
    op.create_index(op.f("ix_resume_attempts_run_id"), "resume_attempts", ["run_id"], unique=False)
    op.create_table(
        "runs",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("flow_name", sa.String(length=200), nullable=False),
        sa.Column("flow_version", sa.Integer(), nullable=False),
        sa.Column(
            "input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("state_version", sa.Integer(), nullable=False),
        sa.Column("next_step", sa.String(length=200), nullable=True),
        sa.Column("checkpoint_seq", sa.Integer(), nullable=False),
        sa.Column("idempotency_key", sa.String(length=200), nullable=True),
        sa.Column("started_by", sa.String(length=200), nullable=True),
        sa.Column("lease_owner", sa.String(length=200), nullable=True),
        sa.Column("lease_epoch", sa.Integer(), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("lost_leases", sa.Integer(), nullable=False),
        sa.Column("step_attempts", sa.Integer(), nullable=False),
        sa.Column("step_executions", sa.Integer(), nullable=False),
        sa.Column("budget_allowance", sa.Float(), nullable=True),
        sa.Column("budget_consumed", sa.Float(), nullable=False),
        sa.Column("pause_requested_by", sa.String(length=200), nullable=True),
        sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("not_before", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "output",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "state IN ('queued', 'running', 'waiting', 'resuming', 'succeeded', 'failed', 'expired', 'cancelled')",
            name=op.f("ck_runs_state"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_runs")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_runs_idempotency_key")),
    )
    op.create_index(op.f("ix_runs_flow_name_state"), "runs", ["flow_name", "state"], unique=False)
    op.create_index(
        op.f("ix_runs_state_lease_expires_at"), "runs", ["state", "lease_expires_at"], unique=False
    )
    op.create_table(
        "checkpoints",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=True),
        sa.Column("next_step", sa.String(length=200), nullable=True),
        sa.Column(
            "state",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("budget_consumed", sa.Float(), nullable=False),
        sa.Column(
            "effects",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_checkpoints_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_checkpoints")),
        sa.UniqueConstraint("run_id", "seq", name=op.f("uq_checkpoints_run_id_seq")),
    )
    op.create_table(
        "effects",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("idempotency_key", sa.String(length=400), nullable=False),
        sa.Column("epoch", sa.Integer(), nullable=False),
        sa.Column("request_hash", sa.String(length=80), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column(
            "receipt",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("error", sa.Text(), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "status IN ('intent', 'applied', 'failed')", name=op.f("ck_effects_status")
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_effects_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_effects")),
        sa.UniqueConstraint("idempotency_key", name=op.f("uq_effects_idempotency_key")),
    )
    op.create_index(op.f("ix_effects_run_id"), "effects", ["run_id"], unique=False)
    op.create_table(
        "events",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("actor", sa.String(length=200), nullable=False),
        sa.Column("trigger", sa.String(length=64), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=True),
        sa.Column(
            "detail",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_events_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_events")),
    )
    op.create_index(op.f("ix_events_run_id"), "events", ["run_id"], unique=False)
    op.create_index(op.f("ix_events_trigger"), "events", ["trigger"], unique=False)
    op.create_table(
        "interrupts",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=200), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.Column("step", sa.String(length=200), nullable=False),
        sa.Column("checkpoint_id", sa.String(length=32), nullable=False),
        sa.Column("state_version", sa.Integer(), nullable=False),
        sa.Column("flow_version", sa.Integer(), nullable=False),
        sa.Column("schema_name", sa.String(length=200), nullable=False),
        sa.Column("schema_version", sa.Integer(), nullable=False),
        sa.Column(
            "json_schema",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "roles",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column(
            "scope",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column(
            "evidence",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("evidence_hash", sa.String(length=80), nullable=False),
        sa.Column("separate_from_starter", sa.Boolean(), nullable=False),
        sa.Column("deadline", sa.DateTime(timezone=True), nullable=False),
        sa.Column("on_expiry", sa.String(length=16), nullable=False),
        sa.Column(
            "escalation",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("escalation_level", sa.Integer(), nullable=False),
        sa.Column(
            "default_input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("supersedes", sa.String(length=32), nullable=True),
        sa.Column("superseded_by", sa.String(length=32), nullable=True),
        sa.Column(
            "previous_input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("decision", sa.String(length=16), nullable=True),
        sa.Column(
            "resume_input",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=True,
        ),
        sa.Column("resolved_by", sa.String(length=200), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "kind IN ('approval', 'evidence', 'event', 'repair', 'budget', 'operator')",
            name=op.f("ck_interrupts_kind"),
        ),
        sa.CheckConstraint(
            "status IN ('pending', 'resolved', 'expired', 'superseded', 'cancelled')",
            name=op.f("ck_interrupts_status"),
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_interrupts_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_interrupts")),
    )
    op.create_index(op.f("ix_interrupts_run_id"), "interrupts", ["run_id"], unique=False)
    op.create_index(
        op.f("ix_interrupts_run_id_checkpoint_id"),
        "interrupts",
        ["run_id", "checkpoint_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_interrupts_status_deadline"), "interrupts", ["status", "deadline"], unique=False
    )


def downgrade() -> None:

    op.drop_index(op.f("ix_interrupts_status_deadline"), table_name="interrupts")
    op.drop_index(op.f("ix_interrupts_run_id_checkpoint_id"), table_name="interrupts")
    op.drop_index(op.f("ix_interrupts_run_id"), table_name="interrupts")
    op.drop_table("interrupts")
    op.drop_index(op.f("ix_events_trigger"), table_name="events")
    op.drop_index(op.f("ix_events_run_id"), table_name="events")
    op.drop_table("events")
    op.drop_index(op.f("ix_effects_run_id"), table_name="effects")
    op.drop_table("effects")
    op.drop_table("checkpoints")
    op.drop_index(op.f("ix_runs_state_lease_expires_at"), table_name="runs")
    op.drop_index(op.f("ix_runs_flow_name_state"), table_name="runs")
    op.drop_table("runs")
    op.drop_index(op.f("ix_resume_attempts_run_id"), table_name="resume_attempts")
    op.drop_index(op.f("ix_resume_attempts_interrupt_id"), table_name="resume_attempts")
    op.drop_index(op.f("ix_resume_attempts_idempotency_key"), table_name="resume_attempts")
    op.drop_table("resume_attempts")
    op.drop_table("actors")
