"""The e-mail notifier: one message per responder, with the reason, the evidence, the
deadline and the responder's own answer links.

Register it on a flow (``flow.notifier(email_answer_links)``); it runs in the notify task of
each new interrupt (worker.ops.notifications: time limit, retries). It writes to the addresses
kept for the actors who may answer (``interlude contacts``), over SMTP with the standard
library, configured by ``INTERLUDE_SMTP_*``; off while ``INTERLUDE_SMTP_HOST`` is empty.
Each responder gets two links, one that approves and one that rejects, each only theirs,
answering once, until the link's expiry (never past the deadline). A message that cannot be
sent has its links revoked before the notifier fails (and is tried again with new ones); a
responder already holding a link to the interrupt is not written to again.
"""

from __future__ import annotations

import json
import logging
import smtplib
import ssl
from email.message import EmailMessage
from email.utils import formatdate, make_msgid

from models.contracts import InterruptView
from models.enums import ContactChannel, Decision
from models.settings import Settings, get_settings
from worker.gateway.answer_links import IssuedLink, issue_links, revoke_links
from worker.ops.contacts import reachable_responders

log = logging.getLogger(__name__)
# The evidence in a message: enough to decide on most approvals; the link's page shows all.
MAX_EVIDENCE_CHARS = 4000
SMTP_TIMEOUT_SECONDS = 20.0
SENDER_OF_REVOCATION = "system:notify"


def email_answer_links(interrupt: InterruptView) -> None:
    """A notifier: write to each responder of ``interrupt`` with their answer links."""
    settings = get_settings()
    if not settings.smtp_host:
        log.info(
            "e-mail notifier off (INTERLUDE_SMTP_HOST is empty)",
            extra={"action": "email_off", "run_id": interrupt.run_id},
        )
        return
    responders = reachable_responders(interrupt, ContactChannel.EMAIL)
    for actor_id, addresses in responders.items():
        _write_to(settings, interrupt, actor_id, addresses)


def _write_to(
    settings: Settings, interrupt: InterruptView, actor_id: str, addresses: list[str]
) -> None:
    links = [
        issue_links(interrupt.id, [actor_id], channel=ContactChannel.EMAIL, decisions=[d])[0]
        for d in (Decision.APPROVED.value, Decision.REJECTED.value)
    ]
    message = compose(settings, interrupt, actor_id, addresses, links)
    try:
        send(settings, message)
    except Exception:
        # Links nobody received must not stay valid; the retry issues new ones.
        for link in links:
            revoke_links(link_id=link.link_id, by=SENDER_OF_REVOCATION)
        raise
    log.info(
        "answer links for interrupt %s e-mailed to %s",
        interrupt.id,
        actor_id,
        extra={"action": "email_sent", "run_id": interrupt.run_id},
    )


def compose(
    settings: Settings,
    interrupt: InterruptView,
    actor_id: str,
    addresses: list[str],
    links: list[IssuedLink],
) -> EmailMessage:
    """The message to one responder (all their addresses), with their links."""
    title = interrupt.reason or interrupt.name
    deadline = interrupt.deadline.strftime("%Y-%m-%d %H:%M UTC")
    evidence = json.dumps(interrupt.evidence, indent=2, sort_keys=True, ensure_ascii=False)
    if len(evidence) > MAX_EVIDENCE_CHARS:
        evidence = evidence[:MAX_EVIDENCE_CHARS] + "\n… (the link's page shows all of it)"
    lines = [
        f"{title}",
        "",
        f"Kind: {interrupt.kind} ({interrupt.name}, step {interrupt.step})",
        f"Run: {interrupt.run_id}",
        f"Answer by: {deadline}",
        f"Scope: {json.dumps(interrupt.scope, sort_keys=True, ensure_ascii=False)}",
        "",
        "Evidence:",
        evidence,
        "",
    ]
    for link in links:
        verb = "Approve" if link.decisions == (Decision.APPROVED.value,) else "Reject"
        lines.append(f"{verb}: {link.url(settings.inbox_url())}")
    expires = min(link.expires_at for link in links).strftime("%Y-%m-%d %H:%M UTC")
    lines += [
        "",
        f"These links are yours ({actor_id}): each answers once, until {expires}.",
        "Opening one decides nothing; you confirm on the page it opens.",
        "Do not forward this message: whoever holds a link answers as you.",
    ]
    message = EmailMessage()
    message["Subject"] = f"[interlude] {title} (answer by {deadline})"[:200]
    message["From"] = settings.smtp_from or f"interlude@{_host_of(settings)}"
    message["To"] = ", ".join(addresses)
    message["Date"] = formatdate(localtime=False)
    message["Message-ID"] = make_msgid(domain=_host_of(settings))
    # Out-of-office replies and mail loops leave automated messages alone (RFC 3834).
    message["Auto-Submitted"] = "auto-generated"
    message.set_content("\n".join(lines))
    return message


def _host_of(settings: Settings) -> str:
    return settings.smtp_host or "localhost"


def send(settings: Settings, message: EmailMessage) -> None:
    """Send over SMTP as ``INTERLUDE_SMTP_*`` says (TLS unless told ``none``)."""
    host, port = settings.smtp_host, settings.smtp_port
    context = ssl.create_default_context()
    client: smtplib.SMTP
    if settings.smtp_security == "ssl":
        client = smtplib.SMTP_SSL(host, port, timeout=SMTP_TIMEOUT_SECONDS, context=context)
    else:
        client = smtplib.SMTP(host, port, timeout=SMTP_TIMEOUT_SECONDS)
    with client:
        if settings.smtp_security == "starttls":
            client.starttls(context=context)
        if settings.smtp_user:
            client.login(settings.smtp_user, settings.smtp_password)
        client.send_message(message)
