"""on PostgreSQL, the columns that hold an enum's value are domains, not CHECK constraints

A table's CHECK constraint costs PostgreSQL a parse and a planning of its stored expression in
every statement that writes the table; a domain's check is parsed once per connection and runs
only on the values written to its column (docs/explanation/performance.md, "Enum columns as
domains"). The values allowed are the same; the constraints keep their names, now on the
domains. SQLite keeps its CHECK constraints. A later migration that changes an enum's values
alters the domain's constraint on PostgreSQL (``ALTER DOMAIN ... DROP CONSTRAINT``, then
``ADD CONSTRAINT``) and the table's on SQLite.

No table is rewritten: each column first becomes a domain without a constraint (the same
``VARCHAR``, nothing to convert), then the domain's constraint is added, which checks the rows
already there. Indexes are kept, but for the partial one on the pending interrupts, which is
built again (its predicate names ``status``).

Revision ID: enum_columns_as_domains
Revises: interrupts_listed_in_order
Create Date: 2026-12-06 07:30:00
"""

from __future__ import annotations

from alembic import op

revision = "enum_columns_as_domains"
down_revision = "interrupts_listed_in_order"
branch_labels = None
depends_on = None

# (table, column, length, the values allowed at this revision)
COLUMNS = (
    (
        "runs",
        "state",
        16,
        (
            "queued",
            "running",
            "waiting",
            "resuming",
            "succeeded",
            "failed",
            "expired",
            "cancelled",
        ),
    ),
    (
        "interrupts",
        "kind",
        16,
        ("approval", "evidence", "event", "repair", "budget", "operator"),
    ),
    ("interrupts", "status", 16, ("pending", "resolved", "expired", "superseded", "cancelled")),
    ("notifications", "status", 16, ("owed", "notified", "skipped", "failed")),
    (
        "resume_attempts",
        "outcome",
        32,
        (
            "accepted",
            "duplicate",
            "malformed",
            "unauthenticated",
            "stale",
            "expired",
            "denied",
            "invalid_input",
            "renewed_review_required",
            "unknown_schema",
            "key_reused",
            "kept",
        ),
    ),
    ("actors", "kind", 16, ("human", "service")),
    ("actor_contacts", "channel", 16, ("email", "slack")),
    ("effects", "status", 16, ("intent", "applied", "failed")),
)


def _in(values: tuple[str, ...]) -> str:
    return ", ".join(f"'{value}'" for value in values)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, length, values in COLUMNS:
        domain, constraint = f"{table}_{column}", f"ck_{table}_{column}"
        op.execute(f"CREATE DOMAIN {domain} AS VARCHAR({length})")
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE {domain}")
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
        op.execute(
            f"ALTER DOMAIN {domain} ADD CONSTRAINT {constraint} CHECK (VALUE IN ({_in(values)}))"
        )


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for table, column, length, values in COLUMNS:
        domain, constraint = f"{table}_{column}", f"ck_{table}_{column}"
        op.execute(f"ALTER TABLE {table} ALTER COLUMN {column} TYPE VARCHAR({length})")
        op.execute(f"DROP DOMAIN {domain}")
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {constraint} CHECK ({column} IN ({_in(values)}))"
        )
