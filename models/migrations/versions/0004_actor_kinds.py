"""an actor's kind (human or service) is stored, no longer claimed by each request

Revision ID: actor_kinds
Revises: sec11_keys_per_actor
Create Date: 2026-12-03 12:00:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "actor_kinds"
down_revision = "sec11_keys_per_actor"
branch_labels = None
depends_on = None

SERVICE = "service:"


def upgrade() -> None:
    with op.batch_alter_table("actors") as batch:
        batch.add_column(
            sa.Column("kind", sa.String(length=16), nullable=False, server_default="human")
        )
    # Before, every request named its own kind. An actor that has acted as a service (the
    # events record each resume and operator action as ``service:ID``) stays one; the others
    # become people, and `interlude actors kind ID service` corrects one that was not.
    op.execute(
        sa.text(
            "UPDATE actors SET kind = 'service' WHERE id IN "
            "(SELECT substr(actor, :start) FROM events WHERE actor LIKE :prefix)"
        ).bindparams(start=len(SERVICE) + 1, prefix=SERVICE + "%")
    )
    with op.batch_alter_table("actors", recreate="always") as batch:
        batch.alter_column("kind", server_default=None)
        batch.create_check_constraint(op.f("ck_actors_kind"), "kind IN ('human', 'service')")


def downgrade() -> None:
    with op.batch_alter_table("actors", recreate="always") as batch:
        batch.drop_constraint(op.f("ck_actors_kind"), type_="check")
        batch.drop_column("kind")
