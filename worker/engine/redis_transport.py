"""kombu's Redis transport, with one command client per channel instead of one per command,
and no "EMERGENCY DUMP STATE" files when the connection is lost.

kombu's Redis channel builds a new redis-py client for every command it sends outside the
worker's event loop: each publish (a task, a task event) and, with kombu's acknowledgement
emulation (which interlude turns off), each message a worker takes (recorded as
unacknowledged) and acknowledges. Building one costs about 0.1 ms of CPU (it fills a table of
some 170 response callbacks); a W1 run publishes two tasks, and with task events on (Flower
watching) four events more a task. A client holds no connection of its own: each command borrows
one from the channel's pool and gives it back, so one client serves all of a channel's
commands. A channel that replaces its pool (after a lost connection) gets a new client with it.

Without acknowledgement emulation (``worker.engine.broker_options``), the messages a worker
holds (running or prefetched) are in its memory only. When the channel closes, kombu puts them
back on their queues; when it closes because Redis went away, that fails, and kombu pickled
them to a file in the temporary folder that nothing ever reads (one per lost connection). Here
a failed restore is one warning line instead: the database is the outbox, and the reaper
republishes the runs (and the notifications) those messages were for.

``worker.app`` makes it the transport of ``redis://`` and ``rediss://`` URLs; kombu imports
this module when a connection to one is first made.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

log = logging.getLogger(__name__)


class QoS(virtual.QoS):
    """kombu's in-memory QoS (no acknowledgement emulation), whose failed restore is logged."""

    def restore_unacked(self) -> list[tuple[BaseException, Any]]:
        """Put the messages held back on their queues; the ones the broker refused are left to
        the reaper, said in one line, and not returned (kombu would dump them to a file)."""
        unrestored: list[tuple[BaseException, Any]] = super().restore_unacked()  # type: ignore[no-untyped-call]
        if unrestored:
            error = unrestored[0][0]
            log.warning(
                "%d message(s) held when the broker connection closed not put back (%s: %s); "
                "the reaper republishes what they were for",
                len(unrestored),
                type(error).__name__,
                error,
                extra={"action": "restore_failed"},
            )
        return []


class Channel(kombu_redis.Channel):
    _command_client: Any = None

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        if not self.ack_emulation:  # (kombu chose its virtual QoS: ours in its place)
            self.QoS = QoS  # type: ignore[assignment]

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the event loop's clients: kombu makes those once per channel
            return super()._create_client(asynchronous=True)  # type: ignore[no-untyped-call]
        client = self._command_client
        if client is None or client.connection_pool is not self.pool:
            client = self._command_client = super()._create_client()  # type: ignore[no-untyped-call]
        return client


class Transport(kombu_redis.Transport):
    Channel = Channel
