"""Integration tests publish nothing to the broker: their tasks run in-process or not at all."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import event

from models.db import get_engine
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
