"""The web server's application in this process (``fastapi.testclient``), on the test database.

For integration tests that read what the API and the inbox answer: the same application
``interlude serve`` runs, its sessions and throttle on the test's Redis, its resumes through
the gateway into the dispatch seam (``tasks.drain()`` runs them). Server errors are answered
as a client would see them, not raised into the test.
"""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from fastapi.testclient import TestClient

from models.settings import get_settings
from worker.web.asgi import create_app

# High enough that only a test about throttling reaches a limit.
UNTHROTTLED = {"web_client_limit": "100000/minute", "web_actor_limit": "100000/minute"}


@contextmanager
def web_client(**settings: Any) -> Iterator[TestClient]:
    configured = get_settings().model_copy(update={**UNTHROTTLED, **settings})
    with TestClient(create_app(configured), raise_server_exceptions=False) as client:
        yield client


def api_headers(actor: str, credential: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {credential}", "X-Interlude-Actor": actor}


def hidden_fields(page: str) -> dict[str, str]:
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    return {name: html.unescape(value) for name, value in found}


def sign_in(client: TestClient, actor: str, credential: str) -> None:
    """Sign ``client`` (one cookie jar) in to the inbox as ``actor``."""
    form = hidden_fields(client.get("/inbox/signin").text)
    done = client.post(
        "/inbox/signin",
        data={"csrf": form["csrf"], "actor_id": actor, "credential": credential},
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
