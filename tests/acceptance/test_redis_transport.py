"""interlude's Redis transport on a real Redis: one command client per channel, whatever the
number of messages, and a new one when the channel replaces its connection pool.

kombu's own transport builds a redis-py client for every publish, task event and
acknowledgement; the same traffic through kombu's transport is the contrast that shows the
count can grow. (A Redis restart under running workers is in ``test_outages.py``.)
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kombu import Connection

from bench.redis_clients import KOMBU, NAME, ClientCount, round_trip
from tests.conftest import REDIS_DB, REDIS_URL
from tests.services import redis_client
from worker import app
from worker.engine.redis_transport import Channel

# A database of its own: the session's broker (REDIS_DB) has a worker consuming it.
DB = REDIS_DB + 3
URL = f"{REDIS_URL}/{DB}"


@pytest.fixture()
def clients_built() -> Iterator[ClientCount]:
    """How many redis-py clients were built since the test began."""
    redis_client(DB).flushdb()
    with ClientCount() as count:
        yield count
    redis_client(DB).flushdb()


def _clients_for(transport: str | None, messages: int, built: ClientCount) -> int:
    before = built.built
    with Connection(URL, transport=transport) as conn:  # type: ignore[no-untyped-call]
        assert round_trip(app, conn, messages) == [[n] for n in range(messages)]
    # Every message taken was acknowledged: nothing is left to redeliver.
    assert redis_client(DB).hlen("unacked") == 0
    assert redis_client(DB).llen(NAME) == 0
    return built.built - before


def test_a_channel_sends_every_command_through_one_client(clients_built: ClientCount) -> None:
    # Given interlude's transport, When one channel carries 5 and then 50 messages (publish,
    # take, acknowledge), Then it builds as many clients for 50 as for 5
    few = _clients_for(None, 5, clients_built)
    many = _clients_for(None, 50, clients_built)
    # A channel's command client and its event loop's, for ours and the connection's default.
    assert many == few <= 4
    # ...while kombu's transport builds at least one per publish, take and acknowledgement
    kombu_few = _clients_for(KOMBU, 5, clients_built)
    kombu_many = _clients_for(KOMBU, 50, clients_built)
    assert kombu_many - kombu_few >= 3 * 45


def test_a_channel_that_replaced_its_pool_gets_a_new_client(clients_built: ClientCount) -> None:
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
        assert round_trip(app, conn, 3) == [[0], [1], [2]]


def test_the_broker_s_replies_are_parsed_by_hiredis() -> None:
    # Given interlude installed (redis[hiredis]), When a channel sends a command, Then the
    # connection that carried it parses the reply with hiredis, not redis-py's Python parser:
    # the worker's main thread parses every message it takes from the broker.
    with Connection(URL) as conn:  # type: ignore[no-untyped-call]
        client = conn.channel()._create_client()
        assert client.ping()
        connection = client.connection_pool.get_connection()
        try:
            assert type(connection._parser).__name__ == "_HiredisParser"
        finally:
            client.connection_pool.release(connection)
