"""Flows for binding at the act: proposals that change, remembered work, reviewed tool calls,
policy versions.

A proposal is what a model would return: here a counter in the test Redis, so that each
execution of a step proposes something else unless the step remembers its first proposal.
What an effect executes is appended to a Redis list the tests read.
"""

from __future__ import annotations

import functools
import json
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from tests.flows.interrupts import scratch_redis
from worker import Flow, StepContext, input_schema


@input_schema("go.v1")
class Go(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


@input_schema("refund_args.v1")
class RefundArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    order: str = Field(min_length=1)
    amount: int = Field(ge=1)


def refund_approvers(args: RefundArgs) -> list[str]:
    """Refunds above 1,000 need a finance lead; smaller ones a manager or a finance lead."""
    return ["finance-lead"] if args.amount > 1000 else ["manager", "finance-lead"]


agent = Flow("agent_refunds", version=1)
agent.tool("refund", args=RefundArgs, authority=refund_approvers)


def executed(run_id: str) -> list[dict[str, Any]]:
    """The calls the run's effects executed, in order."""
    return [json.loads(item) for item in scratch_redis().lrange(f"executed:{run_id}", 0, -1)]


def proposals(run_id: str) -> int:
    """How many times the run's model was asked for a proposal."""
    return int(scratch_redis().get(f"proposed:{run_id}") or 0)


def propose_refund(run_id: str) -> dict[str, Any]:
    """A model call: it proposes another amount each time it is asked."""
    n = int(scratch_redis().incr(f"proposed:{run_id}"))
    return {"order": "A-1", "amount": 10 * n}


def issue_refund(
    *, order: str, amount: int, run_id: str, idempotency_key: str, fencing_token: int
) -> dict[str, Any]:
    scratch_redis().rpush(f"executed:{run_id}", json.dumps({"order": order, "amount": amount}))
    return {"refund": f"R-{order}-{amount}"}


@agent.step()
def act(ctx: StepContext) -> None:
    mode = ctx.input.get("mode", "changing")
    if mode == "remembered":
        proposal = ctx.remember("proposal", propose_refund, ctx.run_id)
    else:
        proposal = propose_refund(ctx.run_id)
    ctx.interrupt(
        "review_call",
        kind="approval",
        input=Go,
        authority=["manager"],
        evidence={"call": proposal},
        expires_in=3600,
    )
    ctx.effect("refund", issue_refund, run_id=ctx.run_id, **proposal)
    ctx.state["executed"] = proposal


reviewed = Flow("agent_review", version=1)
reviewed.tool("refund", args=RefundArgs, authority=refund_approvers)


@reviewed.step()
def review(ctx: StepContext) -> None:
    args = {"order": ctx.input.get("order", "B-7"), "amount": ctx.input["amount"]}
    call = ctx.review_call("refund", args, expires_in=3600, evidence={"customer": "c-9"})
    ctx.state["edited"] = call.edited
    if call.rejected:
        ctx.state["told_model"] = call.message
        return
    arguments = dict(call.arguments)
    if ctx.input.get("tamper"):
        # A step that recomputes what it executes: not the call that was approved.
        arguments["amount"] += 1
    execute = functools.partial(issue_refund, run_id=ctx.run_id)
    ctx.effect("refund", execute, reviewed=call, **arguments)
    ctx.state["executed"] = call.arguments


policied = Flow("policied", version=1, policy_version="p1")


@policied.step()
def decide(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "go", kind="approval", input=Go, authority=["manager"], evidence={"x": 1}, expires_in=600
    )
    ctx.state["note"] = answer.input.note if isinstance(answer.input, Go) else None


amounts = Flow("amounts", version=1)


@amounts.step()
def pay(ctx: StepContext) -> None:
    ctx.interrupt(
        "go",
        kind="approval",
        input=Go,
        authority=["manager"],
        evidence={"amount": 10},
        expires_in=600,
    )
    ctx.state["paid"] = 10
