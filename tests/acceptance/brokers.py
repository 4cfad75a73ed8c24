"""Brokers for the broker-sensitive acceptance tests: the session's Redis, or RabbitMQ.

A test that takes the ``broker_url`` fixture (``conftest.py``) runs once per broker. The RabbitMQ
variant runs on a private node started once for the session (never the machine's own), and
only on PostgreSQL: the database backends are covered by the Redis variant, and each RabbitMQ
variant costs minutes.
"""

from __future__ import annotations

import pytest
from kombu import Connection

from tests.acceptance.private_services import PrivateRabbit
from worker.tasknames import QUEUE_MAINTENANCE, QUEUE_RESUMES, QUEUE_STEPS

BROKERS = ["redis", "rabbitmq"]
QUEUES = (QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE)


def rabbit_for(request: pytest.FixtureRequest) -> PrivateRabbit:
    """The session's RabbitMQ node with empty queues, or a skip on SQLite."""
    if "database_url" in request.fixturenames and request.getfixturevalue("backend") == "sqlite":
        pytest.skip("the RabbitMQ variants run on PostgreSQL")
    node: PrivateRabbit = request.getfixturevalue("rabbit_node")
    purge(node.url())
    return node


def purge(url: str) -> None:
    """Empty the run queues of a broker that outlives one test."""
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        for queue in QUEUES:
            channel = conn.channel()
            try:
                channel.queue_purge(queue)
            except Exception:
                pass  # a queue not declared yet has nothing to purge
            finally:
                channel.close()


def queued_messages(url: str) -> dict[str, int]:
    """Ready messages in the run queues of a RabbitMQ broker (unacked ones are the worker's)."""
    counts: dict[str, int] = {}
    with Connection(url) as conn:  # type: ignore[no-untyped-call]
        for queue in (QUEUE_STEPS, QUEUE_RESUMES):
            channel = conn.channel()
            try:
                declared = channel.queue_declare(queue=queue, passive=True)
                counts[queue] = int(declared.message_count)
            finally:
                channel.close()
    return counts
