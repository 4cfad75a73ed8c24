"""Refusal limits on the embedded default (in memory): per client, per actor, logged once."""

from __future__ import annotations

import logging

import pytest

from models.errors import ConfigurationError
from worker.web.sessions import MemoryBackend, backend_for
from worker.web.throttle import RefusalLimiter


class Counter:
    def __init__(self) -> None:
        self.counts: dict[str, int] = {}

    def labels(self, scope: str) -> Counter:
        self.scope = scope
        return self

    def inc(self) -> None:
        self.counts[self.scope] = self.counts.get(self.scope, 0) + 1


def test_the_embedded_default_keeps_sessions_and_limits_in_memory() -> None:
    assert isinstance(backend_for("filesystem://"), MemoryBackend)


def test_refusals_past_the_client_limit_are_throttled_and_logged_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    limiter = RefusalLimiter("filesystem://", "2/minute", "100/minute")
    limiter.counter = counter = Counter()
    for _ in range(2):
        assert limiter.check("10.0.0.1", "ada") is None
        limiter.refused("10.0.0.1", "ada")
    with caplog.at_level(logging.WARNING, logger="worker.web.throttle"):
        throttled = [limiter.check("10.0.0.1", "ada") for _ in range(5)]
    assert all(t is not None and t.scope == "client" for t in throttled)
    assert all(t is not None and t.retry_after >= 1 for t in throttled)
    assert counter.counts == {"client": 5}
    assert len([r for r in caplog.records if "is throttled" in r.getMessage()]) == 1
    # Another client is not held back by this one's refusals
    assert limiter.check("10.0.0.2", "bo") is None


def test_refusals_past_the_actor_limit_hold_back_that_actor_from_any_client() -> None:
    limiter = RefusalLimiter("filesystem://", "100/minute", "1/minute")
    limiter.refused("10.0.0.1", "ada")
    throttled = limiter.check("10.0.0.2", "ada")
    assert throttled is not None and (throttled.scope, throttled.key) == ("actor", "ada")
    assert limiter.check("10.0.0.2", "bo") is None


def test_a_limit_that_does_not_parse_names_its_setting() -> None:
    with pytest.raises(ConfigurationError, match="INTERLUDE_WEB_CLIENT_LIMIT 'lots'"):
        RefusalLimiter("filesystem://", "lots", "1/minute")


def test_an_actor_is_one_key_however_its_id_is_spelled() -> None:
    limiter = RefusalLimiter("filesystem://", "100/minute", "2/minute")
    limiter.refused("10.0.0.1", "Ada")
    limiter.refused("10.0.0.2", " ada ")
    for spelling in ("ada", "ADA", "\uff41\uff44\uff41"):
        throttled = limiter.check("10.0.0.3", spelling)
        assert throttled is not None and throttled.scope == "actor" and throttled.key == "ada"


def test_text_that_cannot_be_an_actor_id_is_counted_only_as_its_hash(
    caplog: pytest.LogCaptureFixture,
) -> None:
    typed = "ilc_" + "s3cret" * 8  # a credential typed into the actor id's field
    limiter = RefusalLimiter("filesystem://", "100/minute", "1/minute")
    limiter.refused("10.0.0.1", typed)
    with caplog.at_level(logging.WARNING, logger="worker.web.throttle"):
        throttled = limiter.check("10.0.0.1", typed)
    assert throttled is not None and throttled.key.startswith("not-an-id:")
    assert typed not in throttled.key
    assert not any(typed in str(r.__dict__) for r in caplog.records)
