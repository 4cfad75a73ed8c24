"""Slack: the Block Kit message, and its interactive callbacks through the gateway.

Callback bodies are signed here as Slack signs them (slack_sdk's SignatureVerifier computes
the same signature); nothing goes to the network: the Slack poster and the message updater
are replaced by recorders, and the test reads what would be sent.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlencode

import pytest
from slack_sdk.signature import SignatureVerifier
from sqlalchemy import select

from models.db import transaction
from models.settings import get_settings, reset_settings
from models.tables import ResumeAttempt
from tests.asgi import AsgiClient
from tests.resumes import drain_finished, drain_pending
from worker import add_actor, enqueue_run, get_interrupt, get_run, revoke_actor
from worker.ops import notify_slack
from worker.ops.contacts import add_contact
from worker.testing import TaskRecorder
from worker.web.asgi import create_app

SIGNING_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
RESPONSE_URL = "https://hooks.slack.com/actions/T1/1/abc"
pytestmark = pytest.mark.usefixtures("scratch")


class Recorder:
    def __init__(self) -> None:
        self.posted: list[dict[str, Any]] = []
        self.updates: list[tuple[str, dict[str, Any]]] = []

    def post(self, message: dict[str, Any]) -> None:
        self.posted.append(message)

    def update(self, url: str, message: dict[str, Any]) -> None:
        self.updates.append((url, message))


@pytest.fixture()
def slack(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> Iterator[tuple[AsgiClient, Recorder]]:
    monkeypatch.setenv("INTERLUDE_SLACK_SIGNING_SECRET", SIGNING_SECRET)
    monkeypatch.setenv("INTERLUDE_WEB_CLIENT_LIMIT", "10000/minute")
    reset_settings()
    recorder = Recorder()
    monkeypatch.setattr(notify_slack, "poster", recorder.post)
    app = create_app(get_settings())
    app.state.slack_updater = recorder.update
    client = AsgiClient(app)
    yield client, recorder
    client.close()
    monkeypatch.undo()
    reset_settings()


def _click(
    message: dict[str, Any], action: str, user: str, stamp: str = "1700000000.000100"
) -> bytes:
    """The body Slack posts when ``user`` clicks ``action`` on ``message``."""
    actions = next(b for b in message["blocks"] if b["type"] == "actions")
    button = next(e for e in actions["elements"] if e["action_id"] == action)
    payload = {
        "type": "block_actions",
        "user": {"id": user, "team_id": "T1"},
        "response_url": RESPONSE_URL,
        "actions": [
            {"action_id": action, "value": button["value"], "action_ts": stamp, "type": "button"}
        ],
    }
    return urlencode({"payload": json.dumps(payload)}).encode()


def _signed(body: bytes, secret: str = SIGNING_SECRET, at: int | None = None) -> dict[str, str]:
    stamp = str(at if at is not None else int(time.time()))
    signature = SignatureVerifier(secret).generate_signature(timestamp=stamp, body=body)
    assert signature is not None
    return {
        "X-Slack-Request-Timestamp": stamp,
        "X-Slack-Signature": signature,
        "Content-Type": "application/x-www-form-urlencoded",
    }


def _attempts() -> list[ResumeAttempt]:
    with transaction(readonly=True) as session:
        return list(session.execute(select(ResumeAttempt).order_by(ResumeAttempt.id)).scalars())


def test_the_message_has_the_evidence_and_both_buttons(
    slack: tuple[AsgiClient, Recorder],
) -> None:
    run_id = enqueue_run("linked", {"vendor": "globex", "amount": 990})
    interrupt = drain_pending(run_id)
    # The notifier ran in the notify task and posted one Block Kit message
    (message,) = slack[1].posted
    assert message["text"].startswith("pay globex")
    evidence = next(b for b in message["blocks"] if "```" in b.get("text", {}).get("text", ""))
    assert '"amount": 990' in evidence["text"]["text"]
    actions = next(b for b in message["blocks"] if b["type"] == "actions")
    assert [e["action_id"] for e in actions["elements"]] == [
        "interlude_approve",
        "interlude_reject",
    ]
    bound = json.loads(actions["elements"][0]["value"])
    assert (bound["i"], bound["c"], bound["e"]) == (
        interrupt.id,
        interrupt.checkpoint_id,
        interrupt.evidence_hash,
    )
    assert all("confirm" in e for e in actions["elements"])


def test_a_correctly_signed_click_answers_as_the_mapped_actor_and_updates_the_message(
    slack: tuple[AsgiClient, Recorder],
) -> None:
    client, recorder = slack
    add_actor("alice", ["approver"])
    add_contact("alice", "slack", "U0ALICE")
    run_id = enqueue_run("linked", {"vendor": "globex"})
    drain_pending(run_id)
    body = _click(recorder.posted[0], "interlude_approve", "U0ALICE")
    # When Slack posts the click, signed
    answered = client.post("/v1/slack/actions", content=body, headers=_signed(body))
    # Then it is accepted as alice's, recorded via Slack, and the run continues
    assert answered.status_code == 200
    (attempt,) = _attempts()
    assert (attempt.outcome, attempt.actor_id, attempt.via) == (
        "accepted",
        "alice",
        "slack:U0ALICE",
    )
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).flow_state["by"] == "alice"
    # And the message is replaced by the outcome, its buttons gone
    ((url, update),) = recorder.updates
    assert url == RESPONSE_URL and update["replace_original"] is True
    assert all(b["type"] != "actions" for b in update["blocks"])
    assert "accepted" in update["text"] and "<@U0ALICE> as alice" in update["text"]
    # When Slack delivers the same click again (its retry), it is a duplicate, not a second answer
    again = client.post("/v1/slack/actions", content=body, headers=_signed(body))
    assert again.status_code == 200
    assert [a.outcome for a in _attempts()] == ["accepted", "duplicate"]


@pytest.mark.parametrize(
    "headers",
    [
        pytest.param(
            lambda body: _signed(body, secret="another-secret-entirely"), id="other-secret"
        ),
        pytest.param(lambda body: _signed(body, at=int(time.time()) - 600), id="too-old"),
        pytest.param(
            lambda body: {"Content-Type": "application/x-www-form-urlencoded"}, id="unsigned"
        ),
        pytest.param(
            lambda body: {**_signed(body), "X-Slack-Request-Timestamp": "soon"}, id="bad-stamp"
        ),
    ],
)
def test_a_wrongly_signed_click_is_refused_recorded_and_changes_nothing(
    slack: tuple[AsgiClient, Recorder], headers: Any
) -> None:
    client, recorder = slack
    add_actor("alice", ["approver"])
    add_contact("alice", "slack", "U0ALICE")
    run_id = enqueue_run("linked", {})
    interrupt = drain_pending(run_id)
    body = _click(recorder.posted[0], "interlude_approve", "U0ALICE")
    answered = client.post("/v1/slack/actions", content=body, headers=headers(body))
    assert answered.status_code == 401
    (attempt,) = _attempts()
    assert (attempt.outcome, attempt.actor_id, attempt.via) == (
        "unauthenticated",
        None,
        "slack:unverified",
    )
    assert get_interrupt(interrupt.id).status == "pending"
    assert recorder.updates == []


def test_a_signed_click_by_a_user_kept_for_nobody_or_a_revoked_actor_is_refused(
    slack: tuple[AsgiClient, Recorder],
) -> None:
    client, recorder = slack
    add_actor("alice", ["approver"])
    add_contact("alice", "slack", "U0ALICE")
    run_id = enqueue_run("linked", {})
    interrupt = drain_pending(run_id)
    stranger = _click(recorder.posted[0], "interlude_approve", "U0MALLORY", stamp="1.1")
    assert (
        client.post("/v1/slack/actions", content=stranger, headers=_signed(stranger)).status_code
        == 200
    )
    revoke_actor("alice")
    revoked = _click(recorder.posted[0], "interlude_approve", "U0ALICE", stamp="1.2")
    assert (
        client.post("/v1/slack/actions", content=revoked, headers=_signed(revoked)).status_code
        == 200
    )
    # Both recorded as unauthenticated; the interrupt still waits; each clicker alone is told
    assert [(a.outcome, a.via) for a in _attempts()] == [
        ("unauthenticated", "slack:U0MALLORY"),
        ("unauthenticated", "slack:U0ALICE"),
    ]
    assert get_interrupt(interrupt.id).status == "pending"
    assert [u[1]["response_type"] for u in recorder.updates] == ["ephemeral", "ephemeral"]


def test_a_click_by_someone_without_the_role_is_denied_and_the_message_keeps_asking(
    slack: tuple[AsgiClient, Recorder],
) -> None:
    client, recorder = slack
    add_actor("carol", ["viewer"])
    add_contact("carol", "slack", "U0CAROL")
    drain_pending(enqueue_run("linked", {}))
    body = _click(recorder.posted[0], "interlude_reject", "U0CAROL")
    assert client.post("/v1/slack/actions", content=body, headers=_signed(body)).status_code == 200
    assert [a.outcome for a in _attempts()] == ["denied"]
    ((_, update),) = recorder.updates
    assert update["response_type"] == "ephemeral" and update["replace_original"] is False
    assert "denied" in update["text"]


def test_without_a_signing_secret_the_endpoint_refuses_everything(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("INTERLUDE_SLACK_SIGNING_SECRET", raising=False)
    reset_settings()
    client = AsgiClient(create_app(get_settings()))
    try:
        body = b"payload=%7B%7D"
        assert (
            client.post("/v1/slack/actions", content=body, headers=_signed(body)).status_code == 503
        )
    finally:
        client.close()
