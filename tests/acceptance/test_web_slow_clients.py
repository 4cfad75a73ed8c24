"""A client that trickles its request head holds no connection of a real ``interlude serve``
for long (issue 42, finding 9): the head must be complete within INTERLUDE_WEB_HEAD_SECONDS."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

from tests.webserver import WebServer


def _closed_by_server(sock: socket.socket) -> bool:
    """Whether the server closed the connection (waiting for that up to the socket's timeout)."""
    try:
        return sock.recv(1024) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


def test_a_request_head_sent_a_line_at_a_time_is_cut_off(
    start_web_server: Callable[..., WebServer],
) -> None:
    # Given a server that allows a request head one second
    server = start_web_server(INTERLUDE_WEB_HEAD_SECONDS="1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        # When a client sends a header line every 0.3 s, never ending the head
        sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        sock.settimeout(0.3)
        started = time.monotonic()
        closed_after = None
        while time.monotonic() - started < 6:
            if _closed_by_server(sock):
                closed_after = time.monotonic() - started
                break
            try:
                sock.sendall(b"X-Slow: 1\r\n")
            except ConnectionError:
                closed_after = time.monotonic() - started
                break
    # Then the server closed the connection soon after the second, the client still sending
    assert closed_after is not None, "the server kept the trickling connection open"
    assert closed_after < 3


def test_a_request_sent_at_once_and_a_kept_alive_one_are_answered(
    start_web_server: Callable[..., WebServer],
) -> None:
    server = start_web_server(INTERLUDE_WEB_HEAD_SECONDS="1")
    with socket.create_connection(("127.0.0.1", server.port), timeout=5) as sock:
        for _ in range(2):
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = b""
            while not answer.endswith(b"}"):
                chunk = sock.recv(4096)
                assert chunk, f"the server closed the connection after {answer!r}"
                answer += chunk
            assert answer.startswith(b"HTTP/1.1 200"), answer
