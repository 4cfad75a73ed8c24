"""Server-side sessions of the web inbox: the cookie holds only random values.

The cookie is ``<session id>.<pad>``. The store keeps the session under the sha256 of the id
and the actor's credential XOR-ed with the pad, so neither the store nor the cookie alone
reveals the credential; together they let every answer go through ``submit_resume`` with the
real credential (a revoked actor is refused there, as anywhere). Sessions live in Redis when
the broker is Redis (several ``interlude serve`` processes share them) and in this process's
memory on the embedded default (one process; a restart signs everyone out).

A session ends at the first of two times: its lifetime after sign-in, and a stretch of idle time
with no request (each request that finds it pushes that end back). A browser left signed in
on an unattended desk does not answer approvals for the rest of the working day.
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

COOKIE = "interlude_session"
KEY_PREFIX = "interlude:web:session:"


@dataclass(frozen=True)
class SessionData:
    csrf: str
    actor_id: str | None = None
    # The credential XOR the cookie's pad (base64); None in an anonymous session an earlier
    # version stored (read as signed out until it expires).
    sealed: str | None = None


class Backend(Protocol):
    def put(self, key: str, value: str, ttl: int) -> None: ...
    def get(self, key: str) -> str | None: ...
    def forget(self, key: str) -> None: ...
    def touch(self, key: str, ttl: int) -> None: ...


class MemoryBackend:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._items: dict[str, tuple[float, str]] = {}

    def put(self, key: str, value: str, ttl: int) -> None:
        now = self._clock()
        with self._lock:
            # Forget expired sessions as new ones come, so memory follows the live ones.
            for old in [k for k, (until, _) in self._items.items() if until <= now]:
                del self._items[old]
            self._items[key] = (now + ttl, value)

    def get(self, key: str) -> str | None:
        with self._lock:
            found = self._items.get(key)
        if found is None or found[0] <= self._clock():
            return None
        return found[1]

    def forget(self, key: str) -> None:
        with self._lock:
            self._items.pop(key, None)

    def touch(self, key: str, ttl: int) -> None:
        with self._lock:
            found = self._items.get(key)
            if found is not None:
                self._items[key] = (self._clock() + ttl, found[1])


class RedisBackend:
    def __init__(self, url: str) -> None:
        import redis

        self._client = redis.Redis.from_url(url)

    def put(self, key: str, value: str, ttl: int) -> None:
        self._client.set(key, value, ex=ttl)

    def get(self, key: str) -> str | None:
        value: Any = self._client.get(key)
        return value.decode() if isinstance(value, bytes) else None

    def forget(self, key: str) -> None:
        self._client.delete(key)

    def touch(self, key: str, ttl: int) -> None:
        self._client.expire(key, ttl)


def backend_for(broker_url: str) -> Backend:
    if broker_url.startswith(("redis://", "rediss://")):
        return RedisBackend(broker_url)
    return MemoryBackend()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _xor(data: bytes, pad: bytes) -> bytes:
    return bytes(a ^ b for a, b in zip(data, pad, strict=True))


class SessionStore:
    def __init__(
        self,
        backend: Backend,
        ttl: int,
        idle: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        """Sessions that last ``ttl`` seconds from sign-in, or ``idle`` without a request."""
        self.backend = backend
        self.ttl = ttl
        self.idle = ttl if idle is None else min(idle, ttl)
        self._clock = clock

    def _key(self, session_id: str) -> str:
        return KEY_PREFIX + hashlib.sha256(session_id.encode()).hexdigest()

    def start(self, actor_id: str, credential: str) -> str:
        """A signed-in actor's session; returns the cookie value (the only place its id and pad
        exist). Nothing is started for a visitor who has not signed in (the sign-in form's
        CSRF token is checked against a cookie of its own)."""
        session_id = secrets.token_urlsafe(32)
        data = credential.encode("utf-8", "surrogatepass")
        pad = secrets.token_bytes(len(data))
        record = {
            "csrf": secrets.token_urlsafe(32),
            "actor_id": actor_id,
            "sealed": _b64(_xor(data, pad)),
            "ends": self._clock() + self.ttl,
        }
        self.backend.put(self._key(session_id), json.dumps(record), self.idle)
        return f"{session_id}.{_b64(pad)}"

    def load(self, cookie: str | None) -> tuple[SessionData, str | None] | None:
        """The session a cookie names and the credential it unseals (None when signed out)."""
        if not cookie or "." not in cookie:
            return None
        session_id, _, pad_text = cookie.partition(".")
        key = self._key(session_id)
        stored = self.backend.get(key)
        if stored is None:
            return None
        record = json.loads(stored)
        ends = record.get("ends")  # absent in a session an earlier version stored
        if ends is not None:
            left = ends - self._clock()
            if left <= 0:
                self.backend.forget(key)
                return None
            # Seen now: idle time counts from this request, never past the lifetime.
            self.backend.touch(key, max(1, math.ceil(min(self.idle, left))))
        data = SessionData(record["csrf"], record.get("actor_id"), record.get("sealed"))
        if data.sealed is None or data.actor_id is None:
            return data, None
        try:
            sealed, pad = _unb64(data.sealed), _unb64(pad_text)
            credential = _xor(sealed, pad).decode("utf-8", "surrogatepass")
        except (ValueError, UnicodeDecodeError):
            return None
        return data, credential

    def end(self, cookie: str | None) -> None:
        if cookie:
            self.backend.forget(self._key(cookie.partition(".")[0]))
