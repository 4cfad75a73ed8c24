"""interlude's Redis transport on a real Redis: one command client per channel, whatever the
number of messages, and a new one when the channel replaces its connection pool.

kombu's own transport builds a redis-py client for every publish, task event and
acknowledgement; the same traffic through kombu's transport is the contrast that shows the
count can grow. (A Redis restart under running workers is in ``test_outages.py``.)
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from kombu import Connection, Consumer, Exchange, Producer, Queue  # type: ignore[attr-defined]

from tests.conftest import REDIS_DB, REDIS_URL
from tests.services import redis_client
from worker import app
from worker.redis_transport import Channel

# A database of its own: the session's broker (REDIS_DB) has a worker consuming it.
DB = REDIS_DB + 3
URL = f"{REDIS_URL}/{DB}"
KOMBU = "kombu.transport.redis:Transport"
NAME = "transport-test"
QUEUE = Queue(NAME, Exchange(NAME, type="direct"), routing_key=NAME)  # type: ignore[no-untyped-call]


@pytest.fixture()
def clients_built(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[int]]:
    """A one-item list: how many redis-py clients were built since the test began."""
    built = [0]
    init = redis.Redis.__init__

    def counted(client: redis.Redis, *args: Any, **kwargs: Any) -> None:
        built[0] += 1
        init(client, *args, **kwargs)

    monkeypatch.setattr(redis.Redis, "__init__", counted)
    redis_client(DB).flushdb()
    yield built
    redis_client(DB).flushdb()


def _round_trip(conn: Connection, messages: int) -> list[list[int]]:
    """Publish ``messages`` tasks (with task-sent events) on one channel, then take and
    acknowledge each; the tasks' args, in the order taken."""
    channel = conn.channel()
    try:
        QUEUE(channel).declare()
        producer = Producer(channel)  # type: ignore[no-untyped-call]
        for n in range(messages):
            app.send_task(
                f"{NAME}.noop",
                args=[n],
                task_id=uuid.uuid4().hex,
                producer=producer,
                queue=QUEUE,
            )
        taken: list[Any] = []
        consumer = Consumer(  # type: ignore[no-untyped-call]
            channel, [QUEUE], callbacks=[lambda _body, m: taken.append(m)], accept=["json"]
        )
        args = []
        with consumer:
            for _ in range(messages):
                conn.drain_events(timeout=5)
                message = taken.pop()
                args.append(message.payload[0])
                message.ack()
        return args
    finally:
        channel.close()


def _clients_for(transport: str | None, messages: int, built: list[int]) -> int:
    before = built[0]
    with Connection(URL, transport=transport) as conn:  # type: ignore[no-untyped-call]
        assert _round_trip(conn, messages) == [[n] for n in range(messages)]
    # Every message taken was acknowledged: nothing is left to redeliver.
    assert redis_client(DB).hlen("unacked") == 0
    assert redis_client(DB).llen(NAME) == 0
    return built[0] - before


def test_a_channel_sends_every_command_through_one_client(clients_built: list[int]) -> None:
    # Given interlude's transport, When one channel carries 5 and then 50 messages (publish,
    # task-sent event, take, acknowledge), Then it builds as many clients for 50 as for 5
    few = _clients_for(None, 5, clients_built)
    many = _clients_for(None, 50, clients_built)
    # A channel's command client and its event loop's, for ours and the connection's default.
    assert many == few <= 4
    # ...while kombu's transport builds at least one per publish, event and acknowledgement
    kombu_few = _clients_for(KOMBU, 5, clients_built)
    kombu_many = _clients_for(KOMBU, 50, clients_built)
    assert kombu_many - kombu_few >= 3 * 45


def test_a_channel_that_replaced_its_pool_gets_a_new_client(clients_built: list[int]) -> None:
    with Connection(URL) as conn:  # type: ignore[no-untyped-call]
        channel = conn.channel()
        assert isinstance(channel, Channel)
        first = channel._create_client()
        assert channel._create_client() is first
        # As kombu does when the connection to Redis is lost: the channel drops its pools.
        channel._disconnect_pools()
        second = channel._create_client()
        assert second is not first
        assert second.connection_pool is channel.pool
        channel.close()
        # ...and messages still go through it
        assert _round_trip(conn, 3) == [[0], [1], [2]]
