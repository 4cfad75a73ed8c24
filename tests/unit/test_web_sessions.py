"""Web sessions: the cookie and the store each hold half of what reveals a credential."""

from __future__ import annotations

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
