"""Answer-link tokens: signed, recognised only under the secret that signed them, redacted."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models.errors import ConfigurationError
from models.settings import get_settings, reset_settings
from worker.gateway.answer_links import TOKEN_SHAPE, _new_token, redact_tokens, signed_link_id

SECRET = "k" * 32
LINK_ID = "0123456789abcdef0123456789abcdef"


@pytest.fixture()
def secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("INTERLUDE_LINK_SECRET", SECRET)
    reset_settings()
    yield SECRET
    monkeypatch.undo()
    reset_settings()


def test_a_token_is_recognised_only_as_signed(secret: str, monkeypatch: pytest.MonkeyPatch) -> None:
    token = _new_token(LINK_ID, secret.encode())
    assert TOKEN_SHAPE.fullmatch(token)
    assert signed_link_id(token) == LINK_ID
    # Another nonce under the same MAC, another id, a cut token: none is a link
    mac = token.rpartition(".")[2]
    other = _new_token(LINK_ID, secret.encode())
    assert signed_link_id(f"{other.rpartition('.')[0]}.{mac}") is None
    assert signed_link_id(token.replace(LINK_ID, "f" + LINK_ID[1:])) is None
    assert signed_link_id(token[:-1]) is None
    assert signed_link_id(None) is None
    # And a new secret ends every token signed with the old one
    monkeypatch.setenv("INTERLUDE_LINK_SECRET", "z" * 32)
    reset_settings()
    assert signed_link_id(token) is None


def test_tokens_are_redacted_from_text(secret: str) -> None:
    token = _new_token(LINK_ID, secret.encode())
    line = f'127.0.0.1 - "GET /inbox/a/{token} HTTP/1.1" 200'
    assert redact_tokens(line) == '127.0.0.1 - "GET /inbox/a/ila_[redacted] HTTP/1.1" 200'


def test_a_short_secret_is_refused_without_echoing_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLUDE_LINK_SECRET", "hunter2")
    reset_settings()
    with pytest.raises(ConfigurationError) as refused:
        get_settings()
    assert "INTERLUDE_LINK_SECRET: at least 32 characters" in str(refused.value)
    assert "hunter2" not in str(refused.value)
    monkeypatch.undo()
    reset_settings()
