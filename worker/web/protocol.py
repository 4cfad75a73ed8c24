"""HTTP/1.1 for ``interlude serve``: uvicorn's h11 protocol with a deadline on request heads.

uvicorn closes an idle keep-alive connection, but a client that sends a request head a few
bytes at a time (one header line every few seconds) keeps its connection open for as long as
it likes, and enough such clients use up the server's open files. Here every request head
must be complete within ``seconds`` of the connection opening, or of the response before it:
else the connection is closed.
"""

from __future__ import annotations

import asyncio
from typing import Any

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol


class HeadDeadlineProtocol(H11Protocol):
    """``H11Protocol`` closing a connection whose request head is not complete in time."""

    head_seconds: float = 10.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        # Once the head is in (the client is sending a body, or is done), the request is the
        # application's; a body's pace is not this deadline's business.
        if self.conn.their_state is not h11.IDLE:
            self._disarm()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # the next request's head, on a kept-alive connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._head_deadline = self.loop.call_later(self.head_seconds, self._head_too_slow)

    def _disarm(self) -> None:
        if self._head_deadline is not None:
            self._head_deadline.cancel()
            self._head_deadline = None

    def _head_too_slow(self) -> None:
        self._head_deadline = None
        if self.conn.their_state is h11.IDLE and not self.transport.is_closing():
            self.transport.close()


def head_deadline_protocol(seconds: float) -> type[HeadDeadlineProtocol]:
    """The protocol class uvicorn is given (``Config(http=...)``), with its deadline."""
    return type("HeadDeadlineProtocol", (HeadDeadlineProtocol,), {"head_seconds": seconds})
