"""Connecting to a PostgreSQL server that never answers fails with a clear error, not a hang."""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator

import pytest
from sqlalchemy import text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import OperationalError

from models import dialects
from models.db_errors import describe
from models.dialects import dialect_for

# Far longer than the connect timeout the test sets, far shorter than psycopg's own 130 s.
PATIENCE = 60.0


@pytest.fixture()
def silent_server() -> Iterator[int]:
    """A port that accepts TCP connections and never says a word."""
    sink = socket.socket()
    sink.bind(("127.0.0.1", 0))
    sink.listen(16)
    held: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        sink.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sink.accept()[0])
            except TimeoutError:
                continue
            except OSError:
                return

    acceptor = threading.Thread(target=accept, daemon=True)
    acceptor.start()
    yield sink.getsockname()[1]
    stop.set()
    acceptor.join(5)
    for conn in held:
        conn.close()
    sink.close()


def test_connecting_to_a_silent_server_times_out_with_a_clear_error(
    silent_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a server that accepts connections and never answers (libpq's shortest timeout)
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    monkeypatch.setattr(dialects, "CONNECT_TIMEOUT_SECONDS", 2, raising=False)
    url = make_url(f"postgresql://interlude@127.0.0.1:{silent_server}/interlude")
    engine = dialect_for(url).create(url, 1)
    failure: list[BaseException] = []

    def connect() -> None:
        try:
            with engine.connect() as conn:
                conn.execute(text("SELECT 1"))
        except BaseException as exc:
            failure.append(exc)

    # When something connects to it
    attempt = threading.Thread(target=connect, daemon=True)
    attempt.start()
    attempt.join(PATIENCE)
    # Then the attempt gives up, with an error an operator can read in one line
    assert not attempt.is_alive(), "still connecting to a server that never answers"
    engine.dispose()
    (error,) = failure
    assert isinstance(error, OperationalError)
    assert describe(error) == "database error: connection timeout expired"


def test_the_connect_timeout_and_keepalives_are_set_unless_the_url_sets_them(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("PGCONNECT_TIMEOUT", raising=False)
    plain = make_url("postgresql://u@db/x")
    assert dialects.connect_args(plain) == {
        "connect_timeout": dialects.CONNECT_TIMEOUT_SECONDS,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        "options": "-c TimeZone=UTC",
    }
    assert dialects.CONNECT_TIMEOUT_SECONDS == 10
    # What the URL gives stays as given (SQLAlchemy hands it to libpq)
    own = make_url("postgresql://u@db/x?connect_timeout=3&keepalives_idle=120&options=-cx%3Dy")
    assert dialects.connect_args(own) == {
        "keepalives": 1,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }
    # and so do libpq's environment variables for the timeout and the options
    monkeypatch.setenv("PGCONNECT_TIMEOUT", "4")
    monkeypatch.setenv("PGOPTIONS", "-c search_path=other")
    assert "connect_timeout" not in dialects.connect_args(plain)
    assert "options" not in dialects.connect_args(plain)
