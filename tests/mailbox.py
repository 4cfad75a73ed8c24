"""A real SMTP server in the test process (aiosmtpd) that keeps what it receives."""

from __future__ import annotations

import email
import email.policy
import re
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import EmailMessage
from typing import Any

from aiosmtpd.controller import Controller

from tests.webserver import free_port

LINK = re.compile(r"https?://\S+/inbox/a/ila_\S+")


class Inbox:
    """The messages received, parsed; ``port`` is where the server listens."""

    def __init__(self) -> None:
        self.messages: list[EmailMessage] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self.arrived = threading.Condition()
        self.port = 0

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        parsed = email.message_from_bytes(envelope.content, policy=email.policy.default)
        with self.arrived:
            self.messages.append(parsed)  # type: ignore[arg-type]
            self.envelopes.append((envelope.mail_from, list(envelope.rcpt_tos)))
            self.arrived.notify_all()
        return "250 Message accepted for delivery"

    def wait_for(self, count: int, timeout: float = 30) -> list[EmailMessage]:
        with self.arrived:
            if not self.arrived.wait_for(lambda: len(self.messages) >= count, timeout):
                raise AssertionError(f"{len(self.messages)} messages arrived, not {count}")
            return list(self.messages)


def links_in(message: EmailMessage) -> dict[str, str]:
    """The answer links of a message, by the word before them (Approve, Reject)."""
    body = message.get_body(preferencelist=("plain",))
    assert body is not None
    text = body.get_content()
    found = {}
    for line in text.splitlines():
        match = LINK.search(line)
        if match:
            found[line.split(":", 1)[0].strip()] = match.group(0)
    return found


@contextmanager
def smtp_server() -> Iterator[Inbox]:
    inbox = Inbox()
    inbox.port = free_port()
    controller = Controller(inbox, hostname="127.0.0.1", port=inbox.port)
    controller.start()
    try:
        yield inbox
    finally:
        controller.stop()
