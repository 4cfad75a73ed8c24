"""idempotency keys per actor, payload hash, key_reused, evidence hash format, actor ids

Revision ID: sec11_keys_per_actor
Revises: v12_unknown_schema
Create Date: 2026-11-29 14:50:00
"""

from __future__ import annotations

import unicodedata

import sqlalchemy as sa
from alembic import op

revision = "sec11_keys_per_actor"
down_revision = "v12_unknown_schema"
branch_labels = None
depends_on = None

OUTCOMES_BEFORE = (
    "'accepted', 'duplicate', 'malformed', 'unauthenticated', 'stale', 'expired', 'denied', "
    "'invalid_input', 'renewed_review_required', 'unknown_schema'"
)
OUTCOMES = OUTCOMES_BEFORE + ", 'key_reused'"


def upgrade() -> None:
    with op.batch_alter_table("resume_attempts", recreate="always") as batch:
        batch.add_column(sa.Column("payload_hash", sa.String(length=80), nullable=True))
        batch.drop_constraint(op.f("uq_resume_attempts_original_key"), type_="unique")
        batch.create_unique_constraint(
            op.f("uq_resume_attempts_actor_id_original_key"), ["actor_id", "original_key"]
        )
        batch.drop_constraint(op.f("ck_resume_attempts_outcome"), type_="check")
        batch.create_check_constraint(
            op.f("ck_resume_attempts_outcome"), f"outcome IN ({OUTCOMES})"
        )
    with op.batch_alter_table("interrupts") as batch:
        # NULL marks the interrupts hashed before RFC 8785: their stored hash stays valid.
        batch.add_column(sa.Column("evidence_canon", sa.String(length=16), nullable=True))
    _normalise_actor_ids()


def _normalise_actor_ids() -> None:
    """Actor ids as they are created from now on (trimmed, NFKC, case-folded).

    An id whose normal form another actor already holds is left as it is (and can no longer
    authenticate): which of the two is the real one is for an operator to decide.
    """
    conn = op.get_bind()
    ids = [row[0] for row in conn.execute(sa.text("SELECT id FROM actors"))]
    taken = set(ids)
    for actor_id in ids:
        normal = unicodedata.normalize("NFKC", actor_id.strip()).casefold()
        if normal == actor_id or normal in taken:
            continue
        conn.execute(
            sa.text("UPDATE actors SET id = :new WHERE id = :old"), {"new": normal, "old": actor_id}
        )
        taken.add(normal)


def downgrade() -> None:
    op.execute("DELETE FROM resume_attempts WHERE outcome = 'key_reused'")
    with op.batch_alter_table("interrupts") as batch:
        batch.drop_column("evidence_canon")
    with op.batch_alter_table("resume_attempts", recreate="always") as batch:
        batch.drop_constraint(op.f("ck_resume_attempts_outcome"), type_="check")
        batch.create_check_constraint(
            op.f("ck_resume_attempts_outcome"), f"outcome IN ({OUTCOMES_BEFORE})"
        )
        batch.drop_constraint(op.f("uq_resume_attempts_actor_id_original_key"), type_="unique")
        batch.create_unique_constraint(op.f("uq_resume_attempts_original_key"), ["original_key"])
        batch.drop_column("payload_hash")
