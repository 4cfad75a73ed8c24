"""answer links (answer_links), where actors are reached (actor_contacts); attempts say via

Revision ID: answer_links
Revises: step_timing_forks
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "answer_links"
down_revision = "step_timing_forks"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Nullable, no default: a catalog change only on PostgreSQL, and servers of the previous
    # release keep recording attempts during a rolling deployment (NULL: a credential).
    with op.batch_alter_table("resume_attempts") as batch:
        batch.add_column(sa.Column("via", sa.String(80), nullable=True))
    op.create_table(
        "answer_links",
        sa.Column("id", sa.String(length=32), nullable=False),
        sa.Column("token_hash", sa.String(length=80), nullable=False),
        sa.Column("interrupt_id", sa.String(length=32), nullable=False),
        sa.Column("run_id", sa.String(length=32), nullable=False),
        sa.Column("checkpoint_id", sa.String(length=32), nullable=False),
        sa.Column("scope_hash", sa.String(length=80), nullable=False),
        sa.Column("evidence_hash", sa.String(length=80), nullable=False),
        sa.Column("policy_version", sa.String(length=64), nullable=True),
        sa.Column("actor_id", sa.String(length=200), nullable=False),
        sa.Column("actor_binding", sa.String(length=80), nullable=False),
        sa.Column(
            "decisions",
            sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql"),
            nullable=False,
        ),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by", sa.String(length=200), nullable=True),
        sa.ForeignKeyConstraint(
            ["interrupt_id"],
            ["interrupts.id"],
            name=op.f("fk_answer_links_interrupt_id_interrupts"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_answer_links")),
    )
    op.create_index(
        op.f("ix_answer_links_interrupt_id"), "answer_links", ["interrupt_id"], unique=False
    )
    op.create_index(op.f("ix_answer_links_actor_id"), "answer_links", ["actor_id"], unique=False)
    op.create_table(
        "actor_contacts",
        sa.Column(
            "id",
            sa.BigInteger().with_variant(sa.Integer(), "sqlite"),
            autoincrement=True,
            nullable=False,
        ),
        sa.Column("actor_id", sa.String(length=200), nullable=False),
        sa.Column("channel", sa.String(length=16), nullable=False),
        sa.Column("address", sa.String(length=320), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint("channel IN ('email', 'slack')", name=op.f("ck_actor_contacts_channel")),
        sa.ForeignKeyConstraint(
            ["actor_id"],
            ["actors.id"],
            name=op.f("fk_actor_contacts_actor_id_actors"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_actor_contacts")),
        sa.UniqueConstraint("channel", "address", name=op.f("uq_actor_contacts_channel_address")),
    )
    op.create_index(
        op.f("ix_actor_contacts_actor_id"), "actor_contacts", ["actor_id"], unique=False
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_actor_contacts_actor_id"), table_name="actor_contacts")
    op.drop_table("actor_contacts")
    op.drop_index(op.f("ix_answer_links_actor_id"), table_name="answer_links")
    op.drop_index(op.f("ix_answer_links_interrupt_id"), table_name="answer_links")
    op.drop_table("answer_links")
    with op.batch_alter_table("resume_attempts") as batch:
        batch.drop_column("via")
