"""The exporter says in one line per scrape that the database could not be read."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import pytest

from models.db import dispose_engines
from models.settings import reset_settings
from worker.ops.stats import metrics_registry


@pytest.fixture()
def refused_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """INTERLUDE_DATABASE_URL at a local port where nothing listens."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", f"postgresql://interlude@127.0.0.1:{port}/x")
    reset_settings()
    dispose_engines()
    yield
    dispose_engines()
    monkeypatch.undo()
    reset_settings()


def test_a_scrape_with_the_database_down_logs_one_warning_line(
    refused_database: None, caplog: pytest.LogCaptureFixture
) -> None:
    from prometheus_client import generate_latest

    caplog.set_level(logging.WARNING, logger="worker.ops.stats")
    registry = metrics_registry()
    for _ in range(2):
        # Each scrape serves interlude_stats_up 0 ...
        assert b"interlude_stats_up 0.0" in generate_latest(registry)
    # ... and logs one line, naming the error and what it says, without a traceback
    records = [r for r in caplog.records if r.name == "worker.ops.stats"]
    assert [(r.levelno, r.exc_info) for r in records] == [(logging.WARNING, None)] * 2
    message = records[0].getMessage()
    assert message.startswith(
        "collecting statistics failed: OperationalError: database error: connection failed"
    ), message
    assert "\n" not in message and "Connection refused" in message
