"""The flows whose runs ``bench.scale`` leaves waiting by the million (``INTERLUDE_FLOWS``).

Four flows of two steps each, as an application's would be: the first gathers a record into
the run's state, the second asks someone about it and waits. They differ where a waiting run's
rows and the listings differ: the interrupt's kind, the roles that may answer, how long the ask
lasts and what happens when nobody answers (each expiry policy once), so that a sweep of due
interrupts applies every policy.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from pydantic import BaseModel, ConfigDict

from worker import BudgetGrant, Flow, StepContext, input_schema

DAY = timedelta(days=1)


@input_schema("bench-scale-refund.v1")
class RefundDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""
    amount: str | None = None


@input_schema("bench-scale-documents.v1")
class Documents(BaseModel):
    model_config = ConfigDict(extra="forbid")

    document_ids: list[str]
    note: str = ""


@input_schema("bench-scale-deploy.v1")
class DeployDecision(BaseModel):
    model_config = ConfigDict(extra="forbid")

    note: str = ""


@dataclass(frozen=True)
class Ask:
    """One flow's ask: who answers it, how long it lasts, what its expiry does."""

    flow: str
    kind: str
    roles: list[str]
    lasts: timedelta
    on_expiry: str
    input: type[BaseModel]
    extra: dict[str, Any] = field(default_factory=dict)


ASKS = (
    Ask("bench_scale_refund", "approval", ["finance"], 14 * DAY, "expire", RefundDecision),
    Ask("bench_scale_kyc", "evidence", ["compliance"], 30 * DAY, "cancel", Documents),
    Ask(
        "bench_scale_deploy",
        "approval",
        ["sre", "release-manager"],
        7 * DAY,
        "escalate",
        DeployDecision,
        {"escalate_to": ["sre-lead"], "escalation_expires_in": DAY},
    ),
    Ask(
        "bench_scale_budget",
        "budget",
        ["ops"],
        10 * DAY,
        "default",
        BudgetGrant,
        {"default": BudgetGrant(units=10.0, note="granted when nobody answered")},
    ),
)


def record(n: int, flow: str) -> dict[str, Any]:
    """What the first step gathers: an order as a shop's API returns it (about 600 bytes)."""
    return {
        "order": f"ORD-{n}",
        "customer": {"id": f"cus_{n}", "tier": "gold", "country": "DE", "since": "2019-04-02"},
        "items": [
            {
                "sku": "KB-204",
                "name": "mechanical keyboard, ISO layout",
                "qty": 1,
                "price": "89.90",
            },
            {"sku": "MS-010", "name": "wireless mouse", "qty": 2, "price": "19.95"},
            {"sku": "CB-3M", "name": "USB-C cable, 3 m", "qty": 1, "price": "9.90"},
        ],
        "total": "139.70",
        "currency": "EUR",
        "flow": flow,
        "history": ["placed 2026-11-02", "shipped 2026-11-03", "delivered 2026-11-05"],
    }


def _define(ask: Ask) -> Flow:
    flow = Flow(ask.flow, version=1)

    @flow.step()
    def gather(ctx: StepContext) -> str:
        ctx.state["record"] = record(ctx.input["n"], ask.flow)
        return "review"

    @flow.step()
    def review(ctx: StepContext) -> str | None:
        n = ctx.input["n"]
        answer = ctx.interrupt(
            "review",
            kind=ask.kind,
            input=ask.input,
            authority=ask.roles,
            scope={"order": f"ORD-{n}", "customer": f"cus_{n}"},
            evidence={
                "order": ctx.state["record"],
                "proposal": (
                    "The customer reports the keyboard arrived with two broken keys and sent "
                    "photos; the courier confirms a damaged parcel. Proposed: refund the "
                    "keyboard in full to the original card and keep the rest of the order."
                ),
            },
            expires_in=ask.lasts,
            on_expiry=ask.on_expiry,
            reason=f"{ask.kind} needed for order ORD-{n}",
            separate_from_starter=True,
            **ask.extra,
        )
        ctx.state["decision"] = answer.decision.value
        return "close" if answer.approved else None

    @flow.step()
    def close(ctx: StepContext) -> None:
        ctx.state["closed"] = True
        return None

    return flow


FLOWS = {ask.flow: _define(ask) for ask in ASKS}
