"""kombu's Redis transport, with one command client per channel instead of one per command.

kombu's Redis channel builds a new redis-py client for every command it sends outside the
worker's event loop: each publish (a task, a task event), and each message a worker takes
(recorded as unacknowledged) and acknowledges. Building one costs about 0.1 ms of CPU (it fills
a table of some 170 response callbacks), and a W1 run sends 14 such commands from the caller
and the worker's main process. A client holds no connection of its own: each command borrows
one from the channel's pool and gives it back, so one client serves all of a channel's
commands. A channel that replaces its pool (after a lost connection) gets a new client with it.

``worker.app`` makes it the transport of ``redis://`` and ``rediss://`` URLs; kombu imports
this module when a connection to one is first made.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _command_client: Any = None

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the event loop's clients: kombu makes those once per channel
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        client = self._command_client
        if client is None or client.connection_pool is not self.pool:
            client = self._command_client = super()._create_client()  # type: ignore[no-untyped-call]
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
