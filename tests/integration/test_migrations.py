"""``upgrade head`` produces exactly the schema the models declare, on both backends, and
the CHECK constraints it creates allow exactly the values of the enums."""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import bindparam, insert, inspect, select, text
from sqlalchemy.exc import IntegrityError

from models.db import dispose_engines, get_engine, transaction, utcnow
from models.dialects import Timestamp
from models.enums import (
    ActorKind,
    ContactChannel,
    EffectStatus,
    InterruptKind,
    InterruptStatus,
    NotificationStatus,
    ResumeOutcome,
    RunState,
)
from models.migrate import alembic_config, current_head, upgrade
from models.queries import repeated_work
from models.tables import Base, Event, Interrupt, PendingInterruptRole, Run
from tests.services import create_pg_database, each_statement

ROLE = PendingInterruptRole


def _ours(name: str | None, type_: str, parent_names: object) -> bool:
    # The example flows keep their own records (example_*) in the same database.
    return not (type_ == "table" and name is not None and name.startswith("example_"))


def _created_on(dialect: str) -> Callable[..., bool]:
    """Alembic's filter of the models' objects: those the models create on ``dialect`` only
    (``ddl_if``, which Alembic's comparison does not read), and everything reflected."""

    def include(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
        condition = None if reflected else getattr(obj, "_ddl_if", None)
        return condition is None or condition.dialect in (None, dialect)

    return include


def test_upgrade_head_matches_the_models(database_url: str) -> None:
    # The session fixture already ran `upgrade head` on this database.
    engine = get_engine(database_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn,
            opts={
                "compare_type": True,
                "include_name": _ours,
                "include_object": _created_on(engine.dialect.name),
            },
        )
        assert context.get_current_revision() == current_head()
        diff = compare_metadata(context, Base.metadata)
    assert diff == []


# Every CHECK constraint of interlude's schema: the column and the enum whose values it allows.
ENUM_CHECKS = {
    "ck_runs_state": ("runs", RunState),
    "ck_actors_kind": ("actors", ActorKind),
    "ck_interrupts_kind": ("interrupts", InterruptKind),
    "ck_interrupts_status": ("interrupts", InterruptStatus),
    "ck_resume_attempts_outcome": ("resume_attempts", ResumeOutcome),
    "ck_effects_status": ("effects", EffectStatus),
    "ck_actor_contacts_channel": ("actor_contacts", ContactChannel),
    "ck_notifications_status": ("notifications", NotificationStatus),
}


def _live_checks(database_url: str) -> dict[str, set[str]]:
    """The CHECK constraints the migrations created, as the database itself stores them."""
    engine = get_engine(database_url)
    tables = sorted({table for table, _ in ENUM_CHECKS.values()})
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            # On PostgreSQL they are the constraints of the columns' domains (migration
            # enum_columns_as_domains): no table of ours keeps a CHECK constraint.
            rows = conn.execute(
                text(
                    "SELECT c.conname, pg_get_constraintdef(c.oid), c.contypid <> 0 "
                    "FROM pg_constraint c JOIN pg_namespace n ON n.oid = c.connamespace "
                    "WHERE c.contype = 'c' AND n.nspname = current_schema()"
                )
            ).all()
            ours = [row for row in rows if row[0] in ENUM_CHECKS]
            assert all(on_domain for _, _, on_domain in ours), ours
            return {name: set(QUOTED.findall(definition)) for name, definition, _ in ours}
        found: dict[str, set[str]] = {}
        for table in tables:
            sql = conn.execute(
                text("SELECT sql FROM sqlite_master WHERE type = 'table' AND name = :name"),
                {"name": table},
            ).scalar_one()
            for name, body in SQLITE_CHECK.findall(sql):
                found[name] = set(QUOTED.findall(body))
        return found


QUOTED = re.compile(r"'([^']*)'")
# ``CONSTRAINT ck_x CHECK (col IN ('a', 'b'))`` in a CREATE TABLE statement.
SQLITE_CHECK = re.compile(r"CONSTRAINT\s+\"?(\w+)\"?\s+CHECK\s*\((.*?\))\s*\)", re.S)


def test_the_migrations_check_constraints_allow_exactly_the_enum_values(
    database_url: str,
) -> None:
    # An enum member added (or removed) without a migration fails here: Alembic's comparison
    # above does not look at CHECK constraints.
    live = _live_checks(database_url)
    expected = {name: {m.value for m in enum} for name, (_, enum) in ENUM_CHECKS.items()}
    assert live == expected


@pytest.fixture(params=["sqlite", "postgresql"])
def fresh_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A database of its own, to migrate down and up without touching the shared one."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrated.db'}"
        return
    url, drop = create_pg_database()
    yield url
    dispose_engines()
    drop()


def test_actors_that_acted_as_services_stay_services_after_the_upgrade(fresh_url: str) -> None:
    # Given a database before actors had a kind, whose events show bot acting as a service
    upgrade(fresh_url)
    engine = get_engine(fresh_url)
    now = utcnow()
    with engine.begin() as conn:
        conn.execute(insert(Run.__table__).values(**_run("run-kinds-1", "running", now)))
        for actor in ("service:bot", "human:alice", "system:expiry", "service:not-an-actor"):
            conn.execute(
                insert(Event.__table__).values(
                    run_id="run-kinds-1", at=now, actor=actor, trigger="cancel", detail={}
                )
            )
    command.downgrade(alembic_config(fresh_url), "sec11_keys_per_actor")
    with engine.begin() as conn:
        for actor_id in ("bot", "alice", "carol"):
            conn.execute(
                # (the time bound as the column's type: Python 3.12 deprecates sqlite3's own)
                text(
                    "INSERT INTO actors (id, roles, credential_hash, created_at) "
                    "VALUES (:id, '[]', 'h', :at)"
                ).bindparams(bindparam("at", type_=Timestamp())),
                {"id": actor_id, "at": now},
            )
    # When it is upgraded
    upgrade(fresh_url)
    # Then bot is a service and the others people
    with engine.connect() as conn:
        kinds = dict(conn.execute(text("SELECT id, kind FROM actors ORDER BY id")).all())
    assert kinds == {"alice": "human", "bot": "service", "carol": "human"}
    # And the way back drops the kind again
    command.downgrade(alembic_config(fresh_url), "sec11_keys_per_actor")


def test_the_repeated_work_totals_and_a_runs_forks_are_read_through_their_partial_indexes(
    database_url: str,
) -> None:
    # The migration writes the repeated-work kinds out; the query derives them from the enum:
    # a kind added to one and not the other would leave the totals scanning every event.
    sent: list[tuple[str, Any]] = []
    with (
        each_statement(database_url, lambda sql, params: sent.append((sql, params))),
        transaction(readonly=True) as session,
    ):
        repeated_work(session)
    (totals,) = [(sql, params) for sql, params in sent if "FROM events" in sql]
    forks = ("SELECT id FROM runs WHERE forked_from = 'r1' ORDER BY created_at", None)
    engine = get_engine(database_url)
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.exec_driver_sql("SET enable_seqscan = off")
            explain = "EXPLAIN"
        else:
            explain = "EXPLAIN QUERY PLAN"
        plans = [
            "\n".join(str(row[-1]) for row in conn.exec_driver_sql(f"{explain} {sql}", params))
            for sql, params in (totals, forks)
        ]
    assert "ix_events_repeated_work" in plans[0], plans[0]
    assert "ix_runs_forked_from" in plans[1], plans[1]


def test_a_key_starts_one_run_and_only_keyed_runs_are_in_its_index_on_postgresql(
    database_url: str,
) -> None:
    # Alembic's comparison reads neither an index's predicate nor which dialect an object is
    # made on: the schema each database holds is read here.
    engine = get_engine(database_url)
    now = utcnow()
    row = {
        "flow_name": "f",
        "flow_version": 1,
        "input": {},
        "state": RunState.QUEUED.value,
        "created_at": now,
        "updated_at": now,
    }
    with engine.begin() as conn:
        conn.execute(insert(Run), [{**row, "id": f"nokey{i}"} for i in range(3)])
        conn.execute(insert(Run), {**row, "id": "keyed1", "idempotency_key": "k-one"})
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(insert(Run), {**row, "id": "keyed2", "idempotency_key": "k-one"})
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            (definition,) = conn.exec_driver_sql(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'ix_runs_idempotency_key'"
            ).one()
            assert definition.startswith("CREATE UNIQUE INDEX")
            assert definition.endswith("WHERE (idempotency_key IS NOT NULL)")
            conn.exec_driver_sql("SET enable_seqscan = off")
            plan = "\n".join(
                str(r[0])
                for r in conn.exec_driver_sql(
                    "EXPLAIN SELECT id FROM runs WHERE idempotency_key = %(key)s", {"key": "k-one"}
                )
            )
            assert "ix_runs_idempotency_key" in plan, plan
        else:
            sql = conn.exec_driver_sql(
                "SELECT sql FROM sqlite_master WHERE type = 'table' AND name = 'runs'"
            ).scalar_one()
            assert "CONSTRAINT uq_runs_idempotency_key UNIQUE (idempotency_key)" in sql
        conn.execute(text("DELETE FROM runs WHERE id LIKE 'nokey%' OR id = 'keyed1'"))
        conn.commit()


def test_the_interrupts_pending_before_the_upgrade_get_their_role_rows(fresh_url: str) -> None:
    # Given a database before pending_interrupt_roles, with two pending interrupts (one of two
    # roles, named twice) and an answered one
    upgrade(fresh_url)
    command.downgrade(alembic_config(fresh_url), "interrupts_pending_roles")
    engine = get_engine(fresh_url)
    now = utcnow()
    asked = {"alone": ["approver"], "twice": ["legal", "approver", "legal"], "done": ["approver"]}
    with engine.begin() as conn:
        conn.execute(insert(Run.__table__).values(**_run("run-roles-1", "waiting", now)))
        for name, roles in asked.items():
            conn.execute(insert(Interrupt.__table__).values(**_interrupt(name, roles, now)))
    # When it is upgraded
    upgrade(fresh_url)
    # Then each pending interrupt has a row per role, and the answered one none
    with engine.connect() as conn:
        rows = conn.execute(select(ROLE.interrupt_id, ROLE.role))
        assert sorted(tuple(row) for row in rows) == [
            ("alone", "approver"),
            ("twice", "approver"),
            ("twice", "legal"),
        ]
    # And the way back drops the table and its triggers: interrupts are written as before
    command.downgrade(alembic_config(fresh_url), "interrupts_pending_roles")
    with engine.begin() as conn:
        conn.execute(insert(Interrupt.__table__).values(**_interrupt("after", ["x"], now)))
        assert "pending_interrupt_roles" not in inspect(conn).get_table_names()
    upgrade(fresh_url)


def _run(run_id: str, state: str, now: Any) -> dict[str, Any]:
    """A run's row with the columns a migration test needs (the others have defaults)."""
    return {
        "id": run_id,
        "flow_name": "f",
        "flow_version": 1,
        "state": state,
        "input": {},
        "created_at": now,
        "updated_at": now,
    }


def _interrupt(name: str, roles: list[str], now: Any) -> dict[str, Any]:
    return {
        "id": name,
        "run_id": "run-roles-1",
        "name": name,
        "kind": "approval",
        "status": "resolved" if name == "done" else "pending",
        "reason": "",
        "step": "s",
        "checkpoint_id": "c",
        "state_version": 1,
        "flow_version": 1,
        "schema_name": "s",
        "schema_version": 1,
        "json_schema": {},
        "roles": roles,
        "evidence_hash": "h",
        "separate_from_starter": False,
        "deadline": now,
        "on_expiry": "expire",
        "escalation_level": 0,
        "created_at": now,
    }
