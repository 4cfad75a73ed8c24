"""A stand-in for a payment provider, for the tutorial's refund flow (``examples.refunds``).

It behaves as a real provider must for an effect to happen once: a refund is keyed by its
idempotency key (a second call with the same key returns the first refund, never a second
one), it records the fencing token it was called with, and it can be asked whether it saw a
key (the reconciler's question after a crash). Its ledger is a table of its own,
``example_refunds``, in interlude's database, created on first use, so the tutorial needs no
other server; it is not part of interlude's schema.
"""

from __future__ import annotations

import threading
import uuid
from typing import Any

from sqlalchemy import Column, Float, Integer, MetaData, String, Table, insert, inspect, select

from models.db import get_engine, transaction, utcnow
from models.dialects import Timestamp

metadata = MetaData()

refunds = Table(
    "example_refunds",
    metadata,
    Column("id", String(32), primary_key=True),
    Column("idempotency_key", String(400), nullable=False, unique=True),
    Column("customer", String(200), nullable=False),
    Column("amount", Float, nullable=False),
    Column("fencing_token", Integer, nullable=True),
    Column("refunded_at", Timestamp(), nullable=False),
)

# Arbitrary constant: the PostgreSQL advisory lock that serialises creating the table.
_CREATE_LOCK = 7_231_005
_lock = threading.Lock()
_ready: set[str] = set()


def ensure_table() -> None:
    """Create the provider's table in the configured database if it is missing."""
    engine = get_engine()
    url = engine.url.render_as_string(hide_password=False)
    with _lock:
        if url in _ready:
            return
        with transaction(readonly=True) as session:
            present = inspect(session.connection()).has_table(refunds.name)
        if not present:
            with engine.begin() as conn:
                if conn.dialect.name == "postgresql":
                    conn.exec_driver_sql(f"SELECT pg_advisory_xact_lock({_CREATE_LOCK})")
                metadata.create_all(conn, checkfirst=True)
        _ready.add(url)


def drop_table() -> None:
    """Remove the provider's table (tests clean up after themselves with this)."""
    engine = get_engine()
    with _lock:
        metadata.drop_all(engine, checkfirst=True)
        _ready.discard(engine.url.render_as_string(hide_password=False))


def refund(
    customer: str, amount: float, *, idempotency_key: str, fencing_token: int | None = None
) -> dict[str, Any]:
    """Refund ``amount`` to ``customer``; the same key returns the first refund's receipt."""
    ensure_table()
    with transaction() as session:
        found = _receipt(session, idempotency_key)
        if found is not None:
            return found
        session.execute(
            insert(refunds).values(
                id="RF-" + uuid.uuid4().hex[:10],
                idempotency_key=idempotency_key,
                customer=customer,
                amount=amount,
                fencing_token=fencing_token,
                refunded_at=utcnow(),
            )
        )
        receipt = _receipt(session, idempotency_key)
    assert receipt is not None
    return receipt


def find(idempotency_key: str) -> dict[str, Any] | None:
    """The receipt of the refund made under this key, or None if the provider never saw it."""
    ensure_table()
    with transaction(readonly=True) as session:
        return _receipt(session, idempotency_key)


def refunds_for(customer: str) -> list[dict[str, Any]]:
    """Every refund the provider made to ``customer``, oldest first."""
    ensure_table()
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(refunds).where(refunds.c.customer == customer).order_by(refunds.c.refunded_at)
        ).mappings()
        return [dict(row) for row in rows]


def _receipt(session: Any, key: str) -> dict[str, Any] | None:
    row = (
        session.execute(select(refunds).where(refunds.c.idempotency_key == key)).mappings().first()
    )
    if row is None:
        return None
    return {"refund_id": row["id"], "customer": row["customer"], "amount": row["amount"]}
