"""the pending interrupts by role, kept by triggers, for the inbox on both backends

The inbox reads an actor's pending interrupts oldest first. Matched by a condition on the
interrupts' JSON list of roles, the server walked every pending interrupt in creation order up
to the page's last match: beside a million pending interrupts, a role whose hundred thousand
were the youngest took 229 ms a page on PostgreSQL (the GIN index of 0016 helps only a role with
few), and SQLite walked in every case. Here each pending interrupt has a row per role, keyed by
``(role, created_at, interrupt_id)``: a role's page is a range of that key, whatever the other
roles hold (docs/explanation/performance.md, "The inbox by role").

Triggers on ``interrupts`` keep it, so that every path that raises, answers, expires,
escalates, supersedes, cancels or deletes an interrupt keeps it without a statement of its
own: a row per role while the interrupt is pending, none once it is not. The GIN index of 0016
is dropped: the role's rows answer an empty inbox too.

Creating the triggers locks writes to ``interrupts`` until the migration commits, and the
table is filled from the pending interrupts in the same transaction: 4.8 s for a million
pending interrupts on the project's machine, into 101 MB. Raising and answering interrupts
wait that long; nothing is lost.

Revision ID: pending_interrupt_roles
Revises: interrupts_pending_roles
Create Date: 2026-12-07 13:40:00
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "pending_interrupt_roles"
down_revision = "interrupts_pending_roles"
branch_labels = None
depends_on = None

# (As models.enums says it today; written out, as a migration must.)
PENDING = "'pending'"

# PostgreSQL: one trigger function for the three events. An UPDATE calls it only when the
# status or the roles changed and the interrupt was or is pending (the WHEN below), so that
# the updates of a pending interrupt's other columns cost nothing here. A lone role, as most
# interrupts have, is one row written or deleted by its key, without expanding the list into a
# set of rows: a W1 run (one interrupt raised, then answered) cost the server 3.1 % more
# instructions with these triggers than with the GIN index, against 4.8 % expanding it.
PG_FUNCTION = f"""
CREATE FUNCTION pending_interrupt_roles_kept() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP <> 'INSERT' AND OLD.status = {PENDING} THEN
        IF jsonb_array_length(OLD.roles) = 1 THEN
            DELETE FROM pending_interrupt_roles
            WHERE role = OLD.roles ->> 0
              AND created_at = OLD.created_at
              AND interrupt_id = OLD.id;
        ELSE
            DELETE FROM pending_interrupt_roles AS kept
            USING jsonb_array_elements_text(OLD.roles) AS old_role (role)
            WHERE kept.role = old_role.role
              AND kept.created_at = OLD.created_at
              AND kept.interrupt_id = OLD.id;
        END IF;
    END IF;
    IF TG_OP <> 'DELETE' AND NEW.status = {PENDING} THEN
        IF jsonb_array_length(NEW.roles) = 1 THEN
            INSERT INTO pending_interrupt_roles (role, created_at, interrupt_id)
            VALUES (NEW.roles ->> 0, NEW.created_at, NEW.id);
        ELSE
            INSERT INTO pending_interrupt_roles (role, created_at, interrupt_id)
            SELECT DISTINCT new_role.role, NEW.created_at, NEW.id
            FROM jsonb_array_elements_text(NEW.roles) AS new_role (role);
        END IF;
    END IF;
    RETURN NULL;
END
$$
"""
PG_TRIGGERS = [
    f"""CREATE TRIGGER pending_interrupt_roles_on_insert AFTER INSERT ON interrupts
    FOR EACH ROW WHEN (NEW.status = {PENDING})
    EXECUTE FUNCTION pending_interrupt_roles_kept()""",
    f"""CREATE TRIGGER pending_interrupt_roles_on_update AFTER UPDATE OF status, roles
    ON interrupts FOR EACH ROW
    WHEN ((OLD.status = {PENDING} OR NEW.status = {PENDING})
          AND (OLD.status IS DISTINCT FROM NEW.status OR OLD.roles IS DISTINCT FROM NEW.roles))
    EXECUTE FUNCTION pending_interrupt_roles_kept()""",
    f"""CREATE TRIGGER pending_interrupt_roles_on_delete AFTER DELETE ON interrupts
    FOR EACH ROW WHEN (OLD.status = {PENDING})
    EXECUTE FUNCTION pending_interrupt_roles_kept()""",
]
PG_BACKFILL = f"""
INSERT INTO pending_interrupt_roles (role, created_at, interrupt_id)
SELECT DISTINCT r.role, i.created_at, i.id
FROM interrupts AS i CROSS JOIN jsonb_array_elements_text(i.roles) AS r (role)
WHERE i.status = {PENDING}
"""

# SQLite: the same, a trigger per event (its triggers have no function to share).
SQLITE_INSERT_ROWS = f"""
    INSERT INTO pending_interrupt_roles (role, created_at, interrupt_id)
    SELECT DISTINCT value, NEW.created_at, NEW.id FROM json_each(NEW.roles)
    WHERE NEW.status = {PENDING};"""
SQLITE_DELETE_ROWS = """
    DELETE FROM pending_interrupt_roles
    WHERE role IN (SELECT value FROM json_each(OLD.roles))
      AND created_at = OLD.created_at AND interrupt_id = OLD.id;"""
SQLITE_TRIGGERS = [
    f"""CREATE TRIGGER pending_interrupt_roles_on_insert AFTER INSERT ON interrupts
    FOR EACH ROW WHEN NEW.status = {PENDING}
    BEGIN{SQLITE_INSERT_ROWS}
    END""",
    f"""CREATE TRIGGER pending_interrupt_roles_on_update AFTER UPDATE OF status, roles
    ON interrupts FOR EACH ROW
    WHEN (OLD.status = {PENDING} OR NEW.status = {PENDING})
         AND (OLD.status IS NOT NEW.status OR OLD.roles IS NOT NEW.roles)
    BEGIN{SQLITE_DELETE_ROWS}{SQLITE_INSERT_ROWS}
    END""",
    f"""CREATE TRIGGER pending_interrupt_roles_on_delete AFTER DELETE ON interrupts
    FOR EACH ROW WHEN OLD.status = {PENDING}
    BEGIN{SQLITE_DELETE_ROWS}
    END""",
]
SQLITE_BACKFILL = f"""
INSERT INTO pending_interrupt_roles (role, created_at, interrupt_id)
SELECT DISTINCT r.value, i.created_at, i.id
FROM interrupts AS i, json_each(i.roles) AS r
WHERE i.status = {PENDING}
"""
TRIGGER_NAMES = ("on_insert", "on_update", "on_delete")


def upgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "pending_interrupt_roles",
        sa.Column("role", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("interrupt_id", sa.String(length=32), nullable=False),
        sa.PrimaryKeyConstraint(
            "role", "created_at", "interrupt_id", name=op.f("pk_pending_interrupt_roles")
        ),
    )
    if postgresql:
        op.execute(PG_FUNCTION)
        for trigger in PG_TRIGGERS:
            op.execute(trigger)
        op.execute(PG_BACKFILL)
        op.drop_index("ix_interrupts_pending_roles", table_name="interrupts")
    else:
        for trigger in SQLITE_TRIGGERS:
            op.execute(trigger)
        op.execute(SQLITE_BACKFILL)


def downgrade() -> None:
    postgresql = op.get_bind().dialect.name == "postgresql"
    for name in TRIGGER_NAMES:
        on = " ON interrupts" if postgresql else ""
        op.execute(f"DROP TRIGGER pending_interrupt_roles_{name}{on}")
    if postgresql:
        op.execute("DROP FUNCTION pending_interrupt_roles_kept()")
        op.create_index(
            "ix_interrupts_pending_roles",
            "interrupts",
            ["roles"],
            unique=False,
            postgresql_using="gin",
            postgresql_with={"fastupdate": "off"},
            postgresql_where=sa.text(f"status = {PENDING}"),
        )
    op.drop_table("pending_interrupt_roles")
