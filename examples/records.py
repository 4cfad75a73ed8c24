"""The business records the examples keep: their own tables, next to interlude's.

They stand for the systems a real flow talks to (a purchasing system, a sanctions screening
service, an order desk, a deployer, a payment provider). They live in interlude's database so
that the examples need no other server, but they are not part of interlude's schema or its
migrations: they are created on first use, as any application would create its own tables.
"""

from __future__ import annotations

import threading

from sqlalchemy import JSON, Column, Float, Integer, MetaData, String, Table, inspect

from models.db import get_engine, transaction
from models.dialects import Timestamp

metadata = MetaData()

purchase_requests = Table(
    "example_purchase_requests",
    metadata,
    Column("id", String(64), primary_key=True),
    Column("supplier", String(200), nullable=False),
    Column("items", JSON, nullable=False),
    Column("amount", Float, nullable=False),
    # Bumped by every amendment: a certificate is for one revision of a request.
    Column("revision", Integer, nullable=False),
    Column("updated_at", Timestamp(), nullable=False),
)

supplier_checks = Table(
    "example_supplier_checks",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # The effect's idempotency key: a second call with the same key finds the first check.
    Column("idempotency_key", String(400), nullable=False, unique=True),
    Column("supplier", String(200), nullable=False),
    Column("result", String(32), nullable=False),
    Column("checked_at", Timestamp(), nullable=False),
)

orders = Table(
    "example_orders",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("idempotency_key", String(400), nullable=False, unique=True),
    Column("request_id", String(64), nullable=False),
    Column("supplier", String(200), nullable=False),
    Column("amount", Float, nullable=False),
    Column("certificate_id", String(200), nullable=False),
    Column("placed_at", Timestamp(), nullable=False),
)

deployments = Table(
    "example_deployments",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("idempotency_key", String(400), nullable=False, unique=True),
    Column("service", String(200), nullable=False),
    Column("environment", String(32), nullable=False),
    Column("version", String(64), nullable=False),
    Column("diff_hash", String(80), nullable=False),
    Column("deployed_at", Timestamp(), nullable=False),
)

agent_refunds = Table(
    "example_agent_refunds",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("idempotency_key", String(400), nullable=False, unique=True),
    Column("order_id", String(64), nullable=False),
    Column("amount", Integer, nullable=False),
    Column("reason", String(400), nullable=False),
    Column("issued_at", Timestamp(), nullable=False),
)

# Arbitrary constant: the PostgreSQL advisory lock that serialises creating these tables, so
# that two worker processes using the examples for the first time do not race.
_CREATE_LOCK = 7_231_004
_lock = threading.Lock()
_ready: set[str] = set()


def ensure_tables() -> None:
    """Create the examples' tables in the configured database if they are missing.

    It looks before it writes: a revalidator reads the records inside the gateway's
    transaction, and on SQLite a write transaction here would wait for that transaction's
    own write lock until the busy timeout (the resume then fails as a renewed review).
    """
    engine = get_engine()
    url = engine.url.render_as_string(hide_password=False)
    with _lock:
        if url in _ready:
            return
        with transaction(readonly=True) as session:
            present = set(inspect(session.connection()).get_table_names())
        if not present.issuperset(metadata.tables):
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_CREATE_LOCK})")
                metadata.create_all(conn, checkfirst=True)
        _ready.add(url)


def drop_tables() -> None:
    """Remove the examples' tables (tests clean up after themselves with this)."""
    engine = get_engine()
    with _lock:
        metadata.drop_all(engine, checkfirst=True)
        _ready.discard(engine.url.render_as_string(hide_password=False))
