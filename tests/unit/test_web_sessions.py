"""Web sessions: the cookie and the store each hold half of what reveals a credential."""

from __future__ import annotations

import json

from worker.web.sessions import KEY_PREFIX, MemoryBackend, SessionStore

CREDENTIAL = "ilc_" + "s3cret-Token_" * 3


def test_a_signed_in_session_gives_back_the_credential_that_neither_half_holds() -> None:
    backend = MemoryBackend()
    store = SessionStore(backend, ttl=60)
    cookie = store.start("ada", CREDENTIAL)
    loaded = store.load(cookie)
    assert loaded is not None
    data, credential = loaded
    assert (data.actor_id, credential) == ("ada", CREDENTIAL)
    assert CREDENTIAL not in cookie
    session_id = cookie.partition(".")[0]
    assert list(backend._items) == [key for key in backend._items if key.startswith(KEY_PREFIX)]
    stored = " ".join(f"{k} {v}" for k, (_, v) in backend._items.items())
    assert CREDENTIAL not in stored
    assert session_id not in stored  # only its hash names the session


def test_an_unknown_ended_or_tampered_cookie_opens_nothing() -> None:
    store = SessionStore(MemoryBackend(), ttl=60)
    cookie = store.start("ada", CREDENTIAL)
    assert store.load(None) is None
    assert store.load("nonsense") is None
    assert store.load("x" + cookie) is None
    short_pad = cookie[:-4]
    assert store.load(short_pad) is None
    store.end(cookie)
    assert store.load(cookie) is None


def test_sessions_expire() -> None:
    store = SessionStore(MemoryBackend(), ttl=0)
    assert store.load(store.start("ada", CREDENTIAL)) is None


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_a_session_ends_after_its_idle_time_and_each_request_pushes_that_back() -> None:
    clock = Clock()
    store = SessionStore(MemoryBackend(clock), ttl=3600, idle=600, clock=clock)
    cookie = store.start("ada", CREDENTIAL)
    for _ in range(3):  # a request every nine minutes keeps it: 27 minutes in all
        clock.now += 540
        assert store.load(cookie) is not None
    clock.now += 601  # then ten minutes and a second with no request
    assert store.load(cookie) is None


def test_a_session_in_use_still_ends_at_its_lifetime() -> None:
    clock = Clock()
    store = SessionStore(MemoryBackend(clock), ttl=3600, idle=600, clock=clock)
    cookie = store.start("ada", CREDENTIAL)
    for _ in range(6):  # used every ten minutes less a second, up to its hour
        clock.now += 599
        assert store.load(cookie) is not None
    clock.now += 7  # 3601 s after sign-in, though the last request was 7 s ago
    assert store.load(cookie) is None


def test_a_session_stored_without_an_end_expires_as_stored() -> None:
    # Stored by an earlier version: the store's own expiry still ends it; it is not extended
    clock = Clock()
    backend = MemoryBackend(clock)
    store = SessionStore(backend, ttl=3600, idle=600, clock=clock)
    cookie = store.start("ada", CREDENTIAL)
    key, (until, value) = next(iter(backend._items.items()))
    record = json.loads(value)
    del record["ends"]
    backend._items[key] = (until, json.dumps(record))
    clock.now += 300
    assert store.load(cookie) is not None
    clock.now += 301
    assert store.load(cookie) is None
