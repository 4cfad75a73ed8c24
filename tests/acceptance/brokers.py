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
from tests.conftest import OWN_BROKER_DB
from tests.services import redis_client
from worker.engine.tasknames import QUEUE_MAINTENANCE, QUEUE_NOTIFY, QUEUE_RESUMES, QUEUE_STEPS

BROKERS = ["redis", "rabbitmq"]
QUEUES = (QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE, QUEUE_NOTIFY)


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


def messages_held(broker: str) -> dict[str, int]:
    """Messages the broker of a test's own processes holds: on Redis, every run queue's lists
    (one per priority) and kombu's record of messages taken but not acknowledged (which
    interlude's transport options leave unwritten); on RabbitMQ, the ready messages of the run
    queues (unacknowledged deliveries are the worker's, and it reports them as reserved)."""
    if broker.startswith("amqp://"):
        return queued_messages(broker)
    redis = redis_client(OWN_BROKER_DB)
    counts: dict[str, int] = {}
    for key in redis.scan_iter("interlude.*"):
        if redis.type(key) == b"list":
            counts[key.decode(errors="replace")] = int(redis.llen(key))
    for key in ("unacked", "unacked_index"):
        counts[key] = int(redis.zcard(key) if redis.type(key) == b"zset" else redis.hlen(key))
    return counts
