"""A support agent that proposes tool calls: a person reviews every refund before it runs.

The story: a customer writes that an order arrived damaged. A model (scripted by default; a
real one by configuration) answers each turn of the conversation with a tool call or a reply.
Every proposed ``refund`` call is reviewed (``ctx.review_call``): approved as proposed, edited
(authorized again for what it became: refunds above 1,000 need a ``finance-lead``) or rejected
with a message that goes back into the conversation, and the model proposes again. The
approved call runs once, with exactly the approved arguments (``ctx.effect(...,
reviewed=call)``). The step runs again from its top after every answer; each of the model's
turns is kept with ``ctx.remember``, so the call executed is the call the reviewer saw.

The model: ``AGENT_MODEL=module:function`` names a function that takes the conversation (a
list of messages, below) and returns the next action, ``{"tool": "refund", "args": {...}}``
or ``{"reply": "..."}``; without it, ``scripted_model`` stands in (no network). Messages:
``{"role": "user", "content": text}``, ``{"role": "assistant", "tool_call": action}`` or
``{"role": "assistant", "content": reply}``, and ``{"role": "tool", "tool": name, "status":
"done" | "rejected" | "invalid" | "unknown", "content": ...}`` (a rejection's message, a
receipt, or what was wrong with the call).

Run it: ``interlude demo agent`` (or ``python -m examples.agent``). Application side:
``enqueue_run("support_agent", {"customer": "C-17", "message": "..."})``.
"""

from __future__ import annotations

import importlib
import os
import re
import uuid
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from sqlalchemy import insert, select

from examples import records
from models.db import transaction, utcnow
from models.errors import FlowDefinitionError, InvalidToolCallError
from worker import NOT_APPLIED, Flow, StepContext, input_schema

MODEL_ENV = "AGENT_MODEL"
FINANCE_LEAD = "finance-lead"
SUPPORT_LEAD = "support-lead"
# Refunds above this many euros need a finance lead; smaller ones a support lead or one.
LARGE_REFUND = 1000
REVIEW_HOURS = 24.0
# The conversation ends after this many turns of the model, agreed or not.
MAX_TURNS = 6
# The orders the shop holds (the model reads them as it would through a lookup tool).
ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {
        "customer": "C-17",
        "items": [{"sku": "VLV-200", "description": "gate valve DN200", "quantity": 4}],
        "unit_price": 310,
        "shipping": 20,
    },
}

Model = Callable[[list[dict[str, Any]]], dict[str, Any]]


class AgentInput(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    customer: str = Field(min_length=1, max_length=64)
    message: str = Field(min_length=1, max_length=4000)


@input_schema("refund_call.v1")
class RefundCall(BaseModel):
    """The arguments of the ``refund`` tool: what a reviewer approves, edits or rejects."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    order: str = Field(min_length=1, max_length=64, description="the order refunded")
    amount: int = Field(ge=1, le=100_000, description="in whole euros")
    reason: str = Field(default="", max_length=400, description="what the customer is told")


def refund_approvers(call: RefundCall) -> list[str]:
    """Who may approve a refund: the policy, asked again for an edited call."""
    return [FINANCE_LEAD] if call.amount > LARGE_REFUND else [SUPPORT_LEAD, FINANCE_LEAD]


agent = Flow("support_agent", version=1, input_model=AgentInput)
agent.tool("refund", args=RefundCall, authority=refund_approvers)


# --- the model ----------------------------------------------------------------------------


def scripted_model(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """A stand-in for a language model: the same conversation gets the same answer.

    It proposes refunding the whole order; told why not, it proposes the amount the reviewer
    names (``200 EUR``), else one damaged item; after a refund it replies to the customer, and
    after two rejections it hands the case to a person.
    """
    found = re.search(r"\b[A-Z]-\d+\b", str(conversation[0].get("content", "")))
    order_id = found.group(0) if found else None
    order = ORDERS.get(order_id or "")
    if order_id is None or order is None:
        return {"reply": "Which order is it? I could not find it."}
    last = conversation[-1]
    if last.get("role") == "tool" and last.get("status") == "done":
        receipt = last.get("content") or {}
        return {
            "reply": f"I refunded {receipt.get('amount')} EUR for order {order_id} "
            f"(refund {receipt.get('refund_id')}). Sorry for the trouble."
        }
    if last.get("role") == "tool":
        refused = sum(1 for m in conversation if m.get("status") in {"rejected", "invalid"})
        if refused >= 2:
            return {"reply": "I could not settle this myself; a colleague will contact you."}
        named = re.search(r"(\d+)\s*(?:EUR|euros?|€)", str(last.get("content", "")))
        amount = int(named.group(1)) if named else order["unit_price"]
        reason = "refund agreed with our reviewer" if named else "one damaged item"
        return {"tool": "refund", "args": {"order": order_id, "amount": amount, "reason": reason}}
    total = order["unit_price"] * sum(item["quantity"] for item in order["items"])
    args = {"order": order_id, "amount": total, "reason": "damaged delivery"}
    return {"tool": "refund", "args": args}


def configured_model() -> Model:
    """The model ``AGENT_MODEL`` names (``module:function``), else the scripted one."""
    spec = os.environ.get(MODEL_ENV, "").strip()
    if not spec:
        return scripted_model
    module, _, name = spec.partition(":")
    try:
        found = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise FlowDefinitionError(
            detail=f"{MODEL_ENV}={spec!r} names no function ({type(exc).__name__}: {exc}); "
            "give module:function"
        ) from None
    if not callable(found):
        raise FlowDefinitionError(detail=f"{MODEL_ENV}={spec!r} is not a function")
    model: Model = found
    return model


def next_action(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """Ask the model for its next action; an answer of another shape becomes a reply."""
    action = configured_model()(conversation)
    if isinstance(action, dict) and (isinstance(action.get("tool"), str) or "reply" in action):
        return action
    return {"reply": str(action)}


# --- the refunds desk (an external service, deduplicating on the key) ---------------------


def issue_refund(
    *, order: str, amount: int, reason: str = "", idempotency_key: str
) -> dict[str, Any]:
    """The payment provider: one refund per idempotency key, whatever the number of calls."""
    records.ensure_tables()
    with transaction() as session:
        found = _refund_receipt(session, idempotency_key)
        if found is not None:
            return found
        session.execute(
            insert(records.agent_refunds).values(
                id="RF-" + uuid.uuid4().hex[:10].upper(),
                idempotency_key=idempotency_key,
                order_id=order,
                amount=amount,
                reason=reason,
                issued_at=utcnow(),
            )
        )
        receipt = _refund_receipt(session, idempotency_key)
    assert receipt is not None
    return receipt


def _refund_receipt(session: Any, key: str) -> dict[str, Any] | None:
    table = records.agent_refunds
    row = session.execute(select(table).where(table.c.idempotency_key == key)).mappings().first()
    if row is None:
        return None
    return {"refund_id": row["id"], "order": row["order_id"], "amount": row["amount"]}


def refunds_for(order_id: str) -> list[dict[str, Any]]:
    """The refunds issued for an order (the provider's view)."""
    records.ensure_tables()
    table = records.agent_refunds
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(table).where(table.c.order_id == order_id).order_by(table.c.issued_at)
        ).mappings()
        return [dict(r) for r in rows]


@agent.reconciler("refund")
def find_refund(key: str) -> Any:
    """After a crash between the call and its record: did the provider see this key?"""
    records.ensure_tables()
    with transaction(readonly=True) as session:
        found = _refund_receipt(session, key)
    return NOT_APPLIED if found is None else found


# --- the flow -----------------------------------------------------------------------------


@agent.step()
def converse(ctx: StepContext) -> None:
    """The tool-calling loop: the model proposes, a person reviews, the approved call runs."""
    conversation: list[dict[str, Any]] = [{"role": "user", "content": ctx.input["message"]}]
    for turn in range(MAX_TURNS):
        # Kept with the checkpoint: after a review this step runs again from its top, and
        # must act on the call the reviewer saw, not on what the model would propose now.
        action = ctx.remember(f"turn-{turn}", next_action, list(conversation))
        if "reply" in action:
            conversation.append({"role": "assistant", "content": str(action["reply"])})
            break
        conversation.append({"role": "assistant", "tool_call": action})
        conversation.append(_call_tool(ctx, turn, action))
    last = conversation[-1]
    ctx.state["conversation"] = conversation
    ctx.state["reply"] = last["content"] if last["role"] == "assistant" else None
    ctx.state["refunds"] = [m["content"] for m in conversation if m.get("status") == "done"]


def _call_tool(ctx: StepContext, turn: int, action: dict[str, Any]) -> dict[str, Any]:
    """Review the proposed call and run it if approved; what the model is told back."""
    tool = action["tool"]
    if tool not in agent.tools:
        return _told(tool, "unknown", f"there is no tool {tool!r}; the tools: refund")
    args = action.get("args")
    try:
        call = ctx.review_call(
            tool,
            args if isinstance(args, dict) else {},
            name=f"{tool}-{turn}",  # one review per turn: each answer releases one ask
            expires_in=REVIEW_HOURS * 3600,
            evidence={"customer": ctx.input["customer"], "message": ctx.input["message"]},
            reason=f"the support agent proposes a {tool}",
        )
    except InvalidToolCallError as exc:
        return _told(tool, "invalid", str(exc))
    if call.rejected:
        return _told(tool, "rejected", call.message or "rejected, no reason given")
    # Exactly the approved (or edited) arguments, or the step fails for good.
    receipt = ctx.effect(
        f"{tool}-{turn}", issue_refund, reviewed=call, pass_fencing_token=False, **call.arguments
    )
    return _told(tool, "done", {**receipt, "approved_by": call.actor, "edited": call.edited})


def _told(tool: str, status: str, content: Any) -> dict[str, Any]:
    return {"role": "tool", "tool": tool, "status": status, "content": content}


if __name__ == "__main__":
    import sys

    from worker.cli.demo_agent import run_agent_demo

    sys.exit(run_agent_demo())
