"""The notifier recipe (examples/inbox_webhook.py) posts the inbox link to a real HTTP server."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest

from examples import deploy_gate, inbox_webhook
from models.settings import reset_settings
from tests.resumes import drain_pending
from worker import enqueue_run
from worker.testing import TaskRecorder

REQUEST = {"service": "billing", "environment": "production", "version": "2.4.1", "diff": "d"}


class Received:
    def __init__(self) -> None:
        self.posts: list[tuple[str, dict[str, str], Any]] = []


@pytest.fixture()
def webhook() -> Iterator[tuple[str, Received]]:
    received = Received()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers["Content-Length"])
            body = json.loads(self.rfile.read(length))
            received.posts.append((self.path, dict(self.headers), body))
            self.send_response(204)
            self.end_headers()

        def log_message(self, *args: Any) -> None:
            return None

    server = HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/hooks/interlude", received
    server.shutdown()
    server.server_close()
    thread.join()


@pytest.fixture()
def settings_env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch
    monkeypatch.undo()
    reset_settings()


def test_the_recipe_is_a_notifier_of_the_deploy_gate() -> None:
    assert inbox_webhook.post_inbox_link in deploy_gate.flow.notifiers


def test_a_new_interrupt_is_posted_with_its_inbox_link(
    tasks: TaskRecorder,
    webhook: tuple[str, Received],
    settings_env: pytest.MonkeyPatch,
) -> None:
    # Given a webhook and the inbox's address in the settings
    url, received = webhook
    settings_env.setenv("INTERLUDE_NOTIFY_WEBHOOK_URL", url)
    settings_env.setenv("INTERLUDE_WEB_BASE_URL", "https://inbox.example.org/")
    reset_settings()
    # When a deployment stops for a release manager (the step calls the flow's notifiers
    # once the interrupt is committed)
    run_id = enqueue_run("deploy_gate", REQUEST, started_by="dev.kim")
    interrupt = drain_pending(run_id)
    # Then the webhook received one JSON post with the link to the interrupt's page
    assert len(received.posts) == 1
    path, headers, body = received.posts[0]
    assert path == "/hooks/interlude"
    assert headers["Content-Type"] == "application/json"
    link = f"https://inbox.example.org/inbox/interrupts/{interrupt.id}"
    assert body["url"] == link
    assert link in body["text"]
    assert (body["run_id"], body["kind"], body["roles"]) == (
        run_id,
        "approval",
        ["release-manager"],
    )


def test_without_a_webhook_url_nothing_is_posted(
    tasks: TaskRecorder,
    webhook: tuple[str, Received],
    settings_env: pytest.MonkeyPatch,
) -> None:
    interrupt = drain_pending(enqueue_run("deploy_gate", REQUEST, started_by="dev.kim"))
    settings_env.delenv("INTERLUDE_NOTIFY_WEBHOOK_URL", raising=False)
    reset_settings()
    inbox_webhook.post_inbox_link(interrupt)
    assert webhook[1].posts == []
