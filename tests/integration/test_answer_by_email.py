"""The e-mail notifier against a real SMTP server in this process (aiosmtpd), both databases.

The notify task runs in process (``tasks.drain()``); the browser's part is the acceptance
test of the same name.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from models.settings import reset_settings
from tests.mailbox import Inbox, links_in, smtp_server
from tests.resumes import drain_finished, drain_pending
from worker import add_actor, enqueue_run, get_run, revoke_actor
from worker.gateway.answer_links import answer_with_link, list_links
from worker.ops.contacts import add_contact
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


@pytest.fixture()
def mail(db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[Inbox]:
    with smtp_server() as inbox:
        for name, value in {
            "INTERLUDE_LINK_SECRET": "m" * 40,
            "INTERLUDE_SMTP_HOST": "127.0.0.1",
            "INTERLUDE_SMTP_PORT": str(inbox.port),
            "INTERLUDE_SMTP_SECURITY": "none",
            "INTERLUDE_SMTP_FROM": "approvals@example.org",
            "INTERLUDE_WEB_BASE_URL": "https://approve.example.org",
        }.items():
            monkeypatch.setenv(name, value)
        reset_settings()
        yield inbox
        monkeypatch.undo()
        reset_settings()


def test_one_message_per_responder_with_their_own_links(mail: Inbox) -> None:
    # Given two approvers reached by e-mail (one at two addresses), one without an address,
    # and a revoked one
    for actor in ("alice", "bob", "dave", "eve"):
        add_actor(actor, ["approver"])
    add_contact("alice", "email", "alice@example.org")
    add_contact("alice", "email", "alice@home.example")
    add_contact("bob", "email", "Bob@Example.ORG")
    add_contact("eve", "email", "eve@example.org")
    revoke_actor("eve")
    # When a run asks for an approval
    run_id = enqueue_run("linked", {"vendor": "initech", "amount": 4200})
    interrupt = drain_pending(run_id)
    # Then alice and bob each got one message: reason, evidence, deadline and their links
    messages = mail.wait_for(2)
    assert len(messages) == 2
    by_to = {m["To"]: m for m in messages}
    assert set(by_to) == {"alice@example.org, alice@home.example", "Bob@example.org"}
    alice = by_to["alice@example.org, alice@home.example"]
    assert alice["Subject"].startswith("[interlude] pay initech (answer by ")
    assert alice["From"] == "approvals@example.org"
    text = alice.get_body(preferencelist=("plain",)).get_content()  # type: ignore[union-attr]
    assert '"amount": 4200' in text and interrupt.deadline.strftime("%Y-%m-%d %H:%M") in text
    links = links_in(alice)
    assert set(links) == {"Approve", "Reject"}
    assert all(url.startswith("https://approve.example.org/inbox/a/ila_") for url in links.values())
    assert set(links.values()).isdisjoint(links_in(by_to["Bob@example.org"]).values())
    issued = list_links(interrupt_id=interrupt.id)
    assert sorted((link.actor_id, tuple(link.decisions)) for link in issued) == [
        ("alice", ("approved",)),
        ("alice", ("rejected",)),
        ("bob", ("approved",)),
        ("bob", ("rejected",)),
    ]
    # And bob's reject link, confirmed, rejects as bob
    token = links_in(by_to["Bob@example.org"])["Reject"].rsplit("/", 1)[1]
    assert answer_with_link(token, "rejected").accepted
    assert drain_finished(run_id) == "succeeded"
    assert get_run(run_id).flow_state == {
        "decision": "rejected",
        "by": "bob",
        "input": None,
        "done": True,
    }


def test_a_message_that_cannot_be_sent_leaves_no_valid_link(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an SMTP host where nothing listens
    from tests.webserver import free_port

    monkeypatch.setenv("INTERLUDE_LINK_SECRET", "m" * 40)
    monkeypatch.setenv("INTERLUDE_SMTP_HOST", "127.0.0.1")
    monkeypatch.setenv("INTERLUDE_SMTP_PORT", str(free_port()))
    monkeypatch.setenv("INTERLUDE_SMTP_SECURITY", "none")
    monkeypatch.setenv("INTERLUDE_NOTIFY_RETRIES", "0")
    reset_settings()
    add_actor("alice", ["approver"])
    add_contact("alice", "email", "alice@example.org")
    # When the notifier runs
    interrupt = drain_pending(enqueue_run("linked", {}))
    # Then the links it issued were revoked when sending failed
    issued = list_links(interrupt_id=interrupt.id)
    assert issued and {link.status for link in issued} == {"revoked"}
    assert {link.revoked_by for link in issued} == {"system:notify"}
    monkeypatch.undo()
    reset_settings()
