"""The tutorial's flow: a refund waits for a person in finance, then pays once.

It is the code of docs/tutorial/index.md, executed as written by
tests/integration/test_tutorial.py. ``examples.payments`` stands in for the payment provider.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from examples import payments
from worker import NOT_APPLIED, Flow, StepContext, input_schema


@input_schema("refund-approval.v1")  # what a responder must submit, by name and version
class RefundApproval(BaseModel):
    model_config = ConfigDict(extra="forbid")

    ticket: str = Field(min_length=1)
    note: str = ""


refunds = Flow("refund", version=1)


@refunds.step()
def assess(ctx: StepContext) -> str:
    ctx.state["amount"] = round(float(ctx.input["amount"]), 2)
    return "approve"


@refunds.step()
def approve(ctx: StepContext) -> str | None:
    answer = ctx.interrupt(
        "refund_approval",
        kind="approval",  # approval | evidence | event | repair | budget | operator
        input=RefundApproval,
        authority=["finance"],  # roles that may answer
        scope={"customer": ctx.input["customer"]},
        evidence={"amount": ctx.state["amount"]},
        expires_in=24 * 3600,  # seconds (or a timedelta)
        on_expiry="escalate",  # expire | cancel | escalate | default
        escalate_to=["finance-lead"],
        reason="refunds need a second pair of eyes",
    )
    if not answer.approved or not isinstance(answer.input, RefundApproval):
        ctx.state["outcome"] = "rejected"
        return None
    ctx.state["ticket"] = answer.input.ticket
    return "pay"


@refunds.step()
def pay(ctx: StepContext) -> None:
    # Called as payments.refund(customer, amount, idempotency_key=..., fencing_token=...),
    # and never again once recorded as applied.
    ctx.state["receipt"] = ctx.effect(
        "refund", payments.refund, ctx.input["customer"], ctx.state["amount"]
    )
    ctx.state["outcome"] = "refunded"
    return None


@refunds.reconciler("refund")
def find_refund(idempotency_key: str) -> object:
    """After a crash between the call and its record: did the provider see this key?"""
    receipt = payments.find(idempotency_key)
    return receipt if receipt is not None else NOT_APPLIED
