"""The Slack notifier and its interactive callback: answer with a button, as yourself.

``slack_answer_buttons`` (a notifier: ``flow.notifier(slack_answer_buttons)``) posts a Block
Kit message with the reason, the evidence and approve/reject buttons to
``INTERLUDE_SLACK_CHANNEL``. Slack sends a click to ``POST /v1/slack/actions``
(worker.web.slack), which hands the raw request here: ``handle_action`` verifies Slack's
signature with ``slack_sdk``'s ``SignatureVerifier`` and ``INTERLUDE_SLACK_SIGNING_SECRET``,
finds the actor the clicking Slack user is kept for (``interlude contacts``), builds a
``resume.v1`` contract bound to what the message showed (checkpoint, evidence hash, policy
version in the button) and submits it through the gateway as that actor (``SlackProof``:
the mapping and the actor are checked again in the attempt's transaction). Every click is a
recorded attempt ``via slack:<user>``, a badly signed one too. The message is then updated
to show the outcome (a refusal that concerns only the clicker is told to them alone).

Any chat that sends signed webhooks follows the same pattern: verify the signature over the
raw body, map the chat user through ``actor_contacts``, submit with a proof like SlackProof.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs

from sqlalchemy.orm import Session

from models import contacts as contact_store
from models.contracts import InterruptView, ResumeContract, ResumeResult, contract_payload
from models.db import transaction
from models.enums import ContactChannel, Decision, ResumeOutcome
from models.settings import get_settings
from models.tables import Actor
from worker.gateway import attempt_records as attempts
from worker.gateway.actors import Credential
from worker.gateway.submit import submit_proven
from worker.interrupts import get_interrupt

log = logging.getLogger(__name__)
ACTION_IDS = {"interlude_approve": Decision.APPROVED, "interlude_reject": Decision.REJECTED}
# Block Kit: a section's text is at most 3000 characters.
MAX_SECTION = 2900
MAX_BODY = 64 * 1024
SLACK_HOOKS = "https://hooks.slack.com/"
# Outcomes after which the message no longer asks anyone: its buttons are replaced.
CLOSING = frozenset(
    {
        ResumeOutcome.ACCEPTED,
        ResumeOutcome.DUPLICATE,
        ResumeOutcome.STALE,
        ResumeOutcome.EXPIRED,
        ResumeOutcome.RENEWED_REVIEW_REQUIRED,
    }
)

Poster = Callable[[dict[str, Any]], None]
Updater = Callable[[str, dict[str, Any]], None]


def message_for(interrupt: InterruptView) -> dict[str, Any]:
    """The Block Kit message asking ``interrupt``'s responders (``text`` is the fallback)."""
    title = interrupt.reason or interrupt.name
    evidence = json.dumps(interrupt.evidence, indent=2, sort_keys=True, ensure_ascii=False)
    if len(evidence) > MAX_SECTION - 10:
        evidence = evidence[: MAX_SECTION - 20] + "\n…"
    binding = json.dumps(
        {
            "i": interrupt.id,
            "c": interrupt.checkpoint_id,
            "e": interrupt.evidence_hash,
            "p": interrupt.policy_version,
        },
        separators=(",", ":"),
    )
    deadline = interrupt.deadline.strftime("%Y-%m-%d %H:%M UTC")
    return {
        "text": f"{title} (answer by {deadline})",
        "blocks": [
            {"type": "header", "text": {"type": "plain_text", "text": title[:150]}},
            {
                "type": "section",
                "fields": [
                    {"type": "mrkdwn", "text": f"*Kind*\n{interrupt.kind}"},
                    {"type": "mrkdwn", "text": f"*Answer by*\n{deadline}"},
                    {"type": "mrkdwn", "text": f"*Run*\n`{interrupt.run_id}`"},
                    {"type": "mrkdwn", "text": f"*Who may answer*\n{', '.join(interrupt.roles)}"},
                ],
            },
            {"type": "section", "text": {"type": "mrkdwn", "text": f"```{evidence}```"}},
            {
                "type": "context",
                "elements": [
                    {"type": "mrkdwn", "text": f"evidence {interrupt.evidence_hash[:23]}…"}
                ],
            },
            {
                "type": "actions",
                "block_id": f"interlude:{interrupt.id}",
                "elements": [
                    _button("Approve", "interlude_approve", "primary", binding, title),
                    _button("Reject", "interlude_reject", "danger", binding, title),
                ],
            },
        ],
    }


def _button(label: str, action_id: str, style: str, value: str, title: str) -> dict[str, Any]:
    return {
        "type": "button",
        "text": {"type": "plain_text", "text": label},
        "action_id": action_id,
        "style": style,
        "value": value,
        # Slack asks "are you sure?" before it sends the click.
        "confirm": {
            "title": {"type": "plain_text", "text": f"{label}?"},
            "text": {"type": "plain_text", "text": f"{label}: {title}"[:300]},
            "confirm": {"type": "plain_text", "text": label},
            "deny": {"type": "plain_text", "text": "Cancel"},
        },
    }


def outcome_message(interrupt: InterruptView, result: ResumeResult, who: str) -> dict[str, Any]:
    """The message once answered: the buttons replaced by what became of the click."""
    original = message_for(interrupt)
    blocks = [b for b in original["blocks"] if b["type"] != "actions"]
    text = f"{_mark(result.outcome)} *{result.outcome.value}* ({who}): {result.reason}"
    if result.new_interrupt_id:
        text += f"\nThe run now asks again: interrupt `{result.new_interrupt_id}`."
    blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": text[:MAX_SECTION]}})
    return {"text": text[:MAX_SECTION], "blocks": blocks, "replace_original": True}


def _mark(outcome: ResumeOutcome) -> str:
    return ":white_check_mark:" if outcome is ResumeOutcome.ACCEPTED else ":warning:"


def post_with_bot(message: dict[str, Any]) -> None:
    """Post ``message`` to ``INTERLUDE_SLACK_CHANNEL`` with the bot token (slack_sdk)."""
    from slack_sdk import WebClient

    settings = get_settings()
    WebClient(token=settings.slack_bot_token).chat_postMessage(
        channel=settings.slack_channel, text=message["text"], blocks=message["blocks"]
    )


def update_by_response_url(response_url: str, message: dict[str, Any]) -> None:
    """Replace the message (or tell the clicker alone) through the callback's response_url."""
    from slack_sdk.webhook import WebhookClient

    WebhookClient(response_url, timeout=10).send(
        text=message["text"],
        blocks=message.get("blocks"),
        replace_original=message.get("replace_original"),
        response_type=message.get("response_type"),
    )


# Tests (and other transports) put their own here: nothing else calls Slack.
poster: Poster = post_with_bot


def slack_answer_buttons(interrupt: InterruptView) -> None:
    """A notifier: post the interrupt with approve/reject buttons to the Slack channel."""
    settings = get_settings()
    if not (settings.slack_bot_token and settings.slack_channel) and poster is post_with_bot:
        log.info(
            "Slack notifier off (INTERLUDE_SLACK_BOT_TOKEN or INTERLUDE_SLACK_CHANNEL is empty)",
            extra={"action": "slack_off", "run_id": interrupt.run_id},
        )
        return
    poster(message_for(interrupt))


class SlackProof:
    """Check 2 for a Slack click: the user is still kept for the contract's actor, and that
    actor is active (see ``worker.gateway.attempt_records.Proof``)."""

    single_use = False

    def __init__(self, user_id: str) -> None:
        self.user_id = user_id
        self.via = f"slack:{user_id}"[:80]

    def verify(
        self, session: Session, actor: Actor | None, contract: ResumeContract
    ) -> Actor | None:
        kept_for = contact_store.actor_of(session, ContactChannel.SLACK, self.user_id)
        if actor is None or actor.revoked_at is not None or kept_for != actor.id:
            return None
        return actor


class _Unverified:
    """What a callback that could not be authenticated is recorded as coming through."""

    single_use = False
    via = "slack:unverified"

    def verify(
        self, session: Session, actor: Actor | None, contract: ResumeContract
    ) -> Actor | None:
        return None


@dataclass(frozen=True)
class Handled:
    """What the endpoint answers Slack, the attempt recorded, and the update to send."""

    status: int
    result: ResumeResult | None
    response_url: str | None = None
    update: dict[str, Any] | None = None


def handle_action(body: bytes, headers: Mapping[str, str]) -> Handled:
    """Verify, map, submit and describe one interactive callback (``block_actions``)."""
    secret = get_settings().slack_signing_secret
    if not secret:
        return Handled(503, None)
    if not _signed(secret, body, headers):
        digest = hashlib.sha256(body).hexdigest()
        payload = {"slack": "request signature not valid", "sha256": digest, "bytes": len(body)}
        return Handled(401, _refuse(payload, "Slack's request signature is missing or wrong"))
    try:
        action = _action_of(body)
    except ValueError as exc:
        return Handled(400, _refuse({"slack": "unreadable action"}, str(exc)))
    user_id, decision, binding, response_url, action_ts = action
    with transaction(readonly=True) as session:
        actor_id = contact_store.actor_of(session, ContactChannel.SLACK, user_id)
    if actor_id is None:
        result = _refuse(
            {"slack": "unmapped user", "user": user_id, "interrupt_id": binding.get("i")},
            f"Slack user {user_id} is kept for no actor (interlude contacts add)",
            proof=SlackProof(user_id),
        )
        return Handled(200, result, response_url, _ephemeral(result))
    try:
        interrupt = get_interrupt(str(binding.get("i")))
    except Exception:
        result = _refuse({"slack": "unknown interrupt"}, "the interrupt is gone")
        return Handled(200, result, response_url, _ephemeral(result))
    payload = contract_payload(
        interrupt,
        actor=actor_id,
        decision=decision.value,
        input=None if decision is Decision.APPROVED else {},
        idempotency_key=f"slack-{user_id}-{action_ts}"[:200],
    )
    # Bound to what the message showed, not to what the interrupt holds now.
    payload.update(checkpoint_id=binding.get("c"), evidence_hash=binding.get("e"))
    if binding.get("p") is not None:
        payload["policy_version"] = binding.get("p")
    result = submit_proven(payload, SlackProof(user_id))
    who = f"<@{user_id}> as {actor_id}"
    if result.outcome in CLOSING:
        return Handled(200, result, response_url, outcome_message(interrupt, result, who))
    return Handled(200, result, response_url, _ephemeral(result))


def _signed(secret: str, body: bytes, headers: Mapping[str, str]) -> bool:
    from slack_sdk.signature import SignatureVerifier

    try:
        return SignatureVerifier(secret).is_valid_request(body, dict(headers))
    except (ValueError, TypeError):  # a timestamp that is not a number
        return False


def _action_of(body: bytes) -> tuple[str, Decision, dict[str, Any], str | None, str]:
    """The clicking user, the decision, the button's binding, where to reply, the click's
    time stamp (its idempotency key); ValueError naming what is missing."""
    form = parse_qs(body.decode("utf-8", "replace"))
    payload = json.loads((form.get("payload") or ["{}"])[0])
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        raise ValueError("not a block_actions callback")
    user = payload.get("user") or {}
    actions = payload.get("actions") or []
    if not isinstance(user, dict) or not isinstance(user.get("id"), str) or not actions:
        raise ValueError("the callback names no user or action")
    action = actions[0]
    decision = ACTION_IDS.get(action.get("action_id"))
    if decision is None:
        raise ValueError(f"unknown action {str(action.get('action_id'))[:40]!r}")
    binding = json.loads(action.get("value") or "{}")
    if not isinstance(binding, dict) or not isinstance(binding.get("i"), str):
        raise ValueError("the button's value names no interrupt")
    response_url = payload.get("response_url")
    if not (isinstance(response_url, str) and response_url.startswith(SLACK_HOOKS)):
        # Only Slack's own: the update goes nowhere else, whatever the body says.
        response_url = None
    stamp = str(action.get("action_ts") or payload.get("trigger_id") or "")
    if not stamp:
        raise ValueError("the action has no action_ts")
    return (
        user["id"][:40],
        decision,
        binding,
        response_url,
        stamp[:60],
    )


def _refuse(payload: dict[str, Any], reason: str, *, proof: Any = None) -> ResumeResult:
    """Record a callback that never became a contract, as unauthenticated."""
    attempt = attempts.Attempt(payload, Credential(None), proof=proof or _Unverified())
    return attempts.record(attempt, ResumeOutcome.UNAUTHENTICATED, reason, claim=False)


def _ephemeral(result: ResumeResult) -> dict[str, Any]:
    """A refusal that concerns the clicker only: told to them, the message left asking."""
    text = f"{_mark(result.outcome)} *{result.outcome.value}*: {result.reason}"
    return {"text": text[:MAX_SECTION], "response_type": "ephemeral", "replace_original": False}
