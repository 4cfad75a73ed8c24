"""Inbox sessions in real Redis: the idle time is the key's expiry, pushed back by each use."""

from __future__ import annotations

import hashlib

from tests.conftest import REDIS_DB, REDIS_URL
from tests.services import redis_client
from worker.web.sessions import KEY_PREFIX, RedisBackend, SessionStore


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def test_redis_keeps_a_session_for_its_idle_time_and_each_use_pushes_that_back() -> None:
    client = redis_client(REDIS_DB)
    clock = Clock()
    store = SessionStore(RedisBackend(f"{REDIS_URL}/{REDIS_DB}"), 3600, idle=600, clock=clock)
    cookie = store.start("ada", "ilc_" + "x" * 30)
    key = KEY_PREFIX + hashlib.sha256(cookie.partition(".")[0].encode()).hexdigest()
    try:
        assert 590 <= client.ttl(key) <= 600  # the idle time, not the eight hours
        client.expire(key, 5)  # as if most of the idle time had passed
        clock.now += 3000
        assert store.load(cookie) is not None
        assert 590 <= client.ttl(key) <= 600  # used: a whole idle time again
        clock.now += 550  # 50 s of the lifetime left: the key lives no longer than that
        assert store.load(cookie) is not None
        assert 40 <= client.ttl(key) <= 50
        clock.now += 50
        assert store.load(cookie) is None
        assert not client.exists(key)
    finally:
        client.delete(key)
