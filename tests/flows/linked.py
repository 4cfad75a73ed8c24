"""A flow whose approvals are answered from e-mail and Slack (the answer-link tests).

Its notifiers are interlude's own: each is off until configured (INTERLUDE_SMTP_HOST, the
Slack bot token and channel, or a poster a test puts in ``worker.ops.notify_slack.poster``).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from tests.flows.interrupts import Approval
from worker import Flow, StepContext
from worker.flows.schemas import input_schema
from worker.ops.notify_email import email_answer_links
from worker.ops.notify_slack import slack_answer_buttons


@input_schema("purchase-order.v1")
class PurchaseOrder(BaseModel):
    model_config = ConfigDict(extra="forbid")

    po_number: str
    note: str = ""


linked = Flow("linked", version=1)
linked.notifier(email_answer_links)
linked.notifier(slack_answer_buttons)


@linked.step()
def ask(ctx: StepContext) -> str:
    """An approval (or, with ``{"po": true}``, a purchase-order number, a required input)."""
    wants_po = bool(ctx.input.get("po"))
    answer = ctx.interrupt(
        "sign_off",
        kind="approval",
        input=PurchaseOrder if wants_po else Approval,
        authority=["approver"],
        scope={"vendor": ctx.input.get("vendor", "acme")},
        evidence={
            "vendor": ctx.input.get("vendor", "acme"),
            "amount": ctx.input.get("amount", 120),
        },
        expires_in=float(ctx.input.get("expires_in", 3600)),
        reason=f"pay {ctx.input.get('vendor', 'acme')}",
    )
    ctx.state["decision"] = answer.decision.value
    ctx.state["by"] = answer.actor
    ctx.state["input"] = answer.input.model_dump() if answer.input is not None else None
    return "done"


@linked.step()
def done(ctx: StepContext) -> None:
    ctx.state["done"] = True
    return None
