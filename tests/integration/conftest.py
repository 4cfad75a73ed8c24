"""Integration tests publish nothing to the broker: their tasks run in-process or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event, select

from models.db import get_engine
from models.enums import InterruptStatus
from models.tables import Interrupt, PendingInterruptRole
from worker.testing import TaskRecorder, recording

# Statements sent to the database, each with its parameters.
Sent = list[tuple[str, Any]]


@pytest.fixture(autouse=True)
def _no_broker() -> Iterator[TaskRecorder]:
    """Record every publish of an integration test, even one that does not ask for ``tasks``.

    A test that calls ``execute`` itself would otherwise also publish to the session's broker,
    where a worker process started by another suite may take the task and race the test.
    """
    with recording() as recorder:
        yield recorder


@pytest.fixture()
def sent(db: str) -> Iterator[Sent]:
    """Every statement the test's engine sends while the test runs, with its parameters."""
    seen: Sent = []

    def record(_conn: object, _cursor: object, statement: str, params: Any, *_: object) -> None:
        seen.append((statement, params))

    engine = get_engine()
    event.listen(engine, "before_cursor_execute", record)
    yield seen
    event.remove(engine, "before_cursor_execute", record)


@pytest.fixture(autouse=True)
def _pending_roles_kept(request: pytest.FixtureRequest) -> Iterator[None]:
    """After every test with a database: ``pending_interrupt_roles`` holds a row for each role
    of each pending interrupt and nothing else, whatever the test raised, answered, expired,
    escalated, cancelled or deleted (its triggers keep it; the inbox reads it)."""
    yield
    if "db" not in request.fixturenames:
        return
    with get_engine(request.getfixturevalue("database_url")).connect() as conn:
        role = PendingInterruptRole
        kept = set(conn.execute(select(role.role, role.created_at, role.interrupt_id)))
        pending = select(Interrupt.id, Interrupt.created_at, Interrupt.roles).where(
            Interrupt.status == InterruptStatus.PENDING.value
        )
        expected = {
            (name, created_at, interrupt_id)
            for interrupt_id, created_at, roles in conn.execute(pending)
            for name in roles
        }
    assert kept == expected, "pending_interrupt_roles differs from the pending interrupts"
