"""The HTTP server's edges (issue 42, findings 3, 4 and 8): query values no listing can use are
refused as the document says (422, FastAPI's error shape), an unusable database URL makes the
health check 503, a server error still carries the security headers, and no redirect goes to
the host a request named. The application in process, on SQLite and PostgreSQL."""

from __future__ import annotations

import base64
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from models.db import dispose_engines
from models.settings import reset_settings
from tests.webclient import api_headers, sign_in, web_client
from worker import add_actor

SECURITY_HEADERS = ("Content-Security-Policy", "X-Frame-Options", "X-Content-Type-Options")


def _cursor(raw: str) -> str:
    return base64.urlsafe_b64encode(raw.encode()).decode().rstrip("=")


@pytest.fixture()
def alice(db: str) -> str:
    return add_actor("alice", ["approver"])


@pytest.fixture()
def client(db: str) -> Iterator[TestClient]:
    with web_client() as client:
        yield client


BAD_QUERIES = {
    "huge-min-age": ({"min_age": "1e308"}, "min_age"),
    "infinite-max-age": ({"max_age": "inf"}, "max_age"),
    "nan-age": ({"min_age": "nan"}, "min_age"),
    "empty-kind": ({"kind": ""}, "kind"),
    "cursor-with-nul": ({"cursor": _cursor("2026-01-01T00:00:00+00:00|a\x00b")}, "cursor"),
    "cursor-past-year-9999": ({"cursor": _cursor("9999-12-31T23:00:00-05:00|x")}, "cursor"),
    "cursor-not-ours": ({"cursor": "not-a-cursor"}, "cursor"),
}


@pytest.mark.parametrize("case", sorted(BAD_QUERIES))
def test_a_query_value_no_listing_can_use_is_a_documented_422(
    client: TestClient, alice: str, case: str
) -> None:
    params, name = BAD_QUERIES[case]
    answer = client.get("/v1/interrupts", params=params, headers=api_headers("alice", alice))
    assert answer.status_code == 422, answer.text
    # FastAPI's documented shape (HTTPValidationError), naming the parameter
    [problem] = answer.json()["detail"]
    assert problem["loc"] == ["query", name]
    assert problem["msg"]
    for header in SECURITY_HEADERS:
        assert header in answer.headers


@pytest.mark.parametrize(
    "cursor",
    [_cursor("2026-01-01T00:00:00+00:00|a\x00b"), _cursor("9999-12-31T23:00:00-05:00|x")],
    ids=["nul", "year-9999"],
)
def test_the_inbox_refuses_such_a_cursor_in_words(
    client: TestClient, alice: str, cursor: str
) -> None:
    sign_in(client, "alice", alice)
    page = client.get("/inbox", params={"cursor": cursor})
    assert page.status_code == 422
    assert "cursor is not one this inbox returned" in page.text


def test_a_server_error_carries_the_security_headers_and_no_detail(
    client: TestClient, alice: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a listing that fails in a way nothing foresaw
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("secret internals")

    monkeypatch.setattr("worker.web.api.answerable_interrupts", broken)
    answer = client.get("/v1/interrupts", headers=api_headers("alice", alice))
    # Then the answer is a 500 like any other answer of the server: JSON, with its headers
    assert answer.status_code == 500
    assert "secret internals" not in answer.text
    assert answer.json()["detail"]
    for header in SECURITY_HEADERS:
        assert header in answer.headers


def test_the_health_check_is_503_when_the_database_url_is_unusable(
    client: TestClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert client.get("/healthz").status_code == 200
    # When the server's database URL names no port SQLAlchemy can read
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", "postgresql://u:pw@h:notaport/db")
    reset_settings()
    try:
        answer = client.get("/healthz")
    finally:
        monkeypatch.undo()
        reset_settings()
        dispose_engines()
    # Then the health check says so: 503, not a server error
    assert answer.status_code == 503, answer.text
    assert answer.json() == {"status": "unavailable", "database": "unreachable"}


@pytest.mark.parametrize("path", ["/inbox/", "/v1/interrupts/"])
def test_a_redirect_never_goes_to_the_host_the_request_named(client: TestClient, path: str) -> None:
    answer = client.get(path, headers={"host": "evil.example"}, follow_redirects=False)
    assert answer.status_code in (301, 302, 303, 307, 308)
    location = answer.headers["location"]
    assert "evil.example" not in location
    assert location == path.rstrip("/")
