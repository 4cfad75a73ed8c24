"""Rate limits on refused attempts (resumes, sign-ins, API authentication), per client and actor.

Only refusals are counted: a responder who answers correctly is never slowed down. Past the
limit a request is answered 429 before it reaches the gateway, so a flood costs no database
row per request; it is counted in ``interlude_web_throttled_total`` and logged once per key
and window. Counters live in Redis when the broker is Redis (shared by every ``interlude
serve`` process), else in memory.
"""

from __future__ import annotations

import hashlib
import logging
import time
from dataclasses import dataclass
from typing import Any

from limits import RateLimitItem, RateLimitItemPerMinute, parse
from limits.storage import storage_from_string
from limits.strategies import FixedWindowRateLimiter

from models.errors import ConfigurationError
from models.identity import actor_id_problem, normal_actor_id

log = logging.getLogger(__name__)
NAMESPACE = "interlude-web-refusals"
# One log record per throttled key and minute: the aggregate, not one line per request.
_ONCE = RateLimitItemPerMinute(1)


@dataclass(frozen=True)
class Throttled:
    scope: str  # "client" or "actor"
    key: str
    retry_after: int


def _item(text: str, setting: str) -> RateLimitItem:
    try:
        return parse(text)
    except ValueError:
        raise ConfigurationError(
            detail=f"{setting} {text!r} is not a rate like '30/minute'"
        ) from None


def actor_key(actor: str) -> str:
    """What an actor's refusals are counted under: its id in the normal form it is
    authenticated in (``Alice`` and `` alice `` are one actor, with one limit); text that
    cannot be an actor id (a credential typed in the wrong field, say) only as its hash, so
    that it is neither kept in the counters' store nor logged."""
    if actor_id_problem(actor) is None:
        return normal_actor_id(actor)
    return "not-an-id:" + hashlib.sha256(actor.encode("utf-8", "surrogatepass")).hexdigest()[:32]


class RefusalLimiter:
    def __init__(self, broker_url: str, client_limit: str, actor_limit: str) -> None:
        redis = broker_url.startswith(("redis://", "rediss://"))
        self._storage = storage_from_string(broker_url if redis else "memory://")
        self._limiter = FixedWindowRateLimiter(self._storage)
        self._limits = {
            "client": _item(client_limit, "INTERLUDE_WEB_CLIENT_LIMIT"),
            "actor": _item(actor_limit, "INTERLUDE_WEB_ACTOR_LIMIT"),
        }
        self.counter: Any = None  # a prometheus Counter with a ``scope`` label, when set

    def _keys(self, client: str | None, actor: str | None) -> list[tuple[str, str]]:
        keys = [("client", client[:200])] if client else []
        if actor:
            keys.append(("actor", actor_key(actor)))
        return keys

    def check(self, client: str | None, actor: str | None) -> Throttled | None:
        """Whether this client or actor used up its refusals; counts the request if so."""
        for scope, key in self._keys(client, actor):
            item = self._limits[scope]
            if self._limiter.test(item, NAMESPACE, scope, key):
                continue
            stats = self._limiter.get_window_stats(item, NAMESPACE, scope, key)
            retry_after = max(1, int(stats.reset_time - time.time()) + 1)
            if self.counter is not None:
                self.counter.labels(scope=scope).inc()
            if self._limiter.hit(_ONCE, NAMESPACE, "logged", scope, key):
                # Which client or actor is a value the caller supplied: a field, not the text.
                log.warning(
                    "one %s is throttled: more than %s refused attempts; further attempts in "
                    "this window are answered 429 and counted, not recorded",
                    scope,
                    item,
                    extra={"action": "throttled", "scope": scope, "key": key},
                )
            return Throttled(scope, key, retry_after)
        return None

    def refused(self, client: str | None, actor: str | None) -> None:
        """Count one refused attempt against this client and actor."""
        for scope, key in self._keys(client, actor):
            self._limiter.hit(self._limits[scope], NAMESPACE, scope, key)
