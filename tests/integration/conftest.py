"""Integration tests publish nothing to the broker: their tasks run in-process or not at all."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from worker.testing import TaskRecorder, recording


@pytest.fixture(autouse=True)
def _no_broker() -> Iterator[TaskRecorder]:
    """Record every publish of an integration test, even one that does not ask for ``tasks``.

    A test that calls ``execute`` itself would otherwise also publish to the session's broker,
    where a worker process started by another suite may take the task and race the test.
    """
    with recording() as recorder:
        yield recorder
