"""A flow for the command-line tests: an effect, then a review whose evidence is a file.

The file's text is the evidence; changing the file while the run waits makes the resume
answer ``renewed_review_required`` (the flow revalidates by reading it again).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from worker import Flow, StepContext, input_schema
from worker.flows.flow import RevalidationContext


@input_schema("cli_review.v1")
class Review(BaseModel):
    model_config = ConfigDict(extra="forbid")

    verdict: str
    note: str = ""


review = Flow("cli_review", version=1)


def document(path: str) -> dict[str, Any]:
    return {"document": Path(path).read_text(encoding="utf-8")}


def book(amount: int, *, idempotency_key: str, fencing_token: int) -> dict[str, Any]:
    return {"booked": amount, "key": idempotency_key, "epoch": fencing_token}


@review.step()
def charge(ctx: StepContext) -> str:
    ctx.state["receipt"] = ctx.effect("book", book, int(ctx.input.get("amount", 1)))
    return "check"


@review.step()
def check(ctx: StepContext) -> None:
    answer = ctx.interrupt(
        "review",
        kind="evidence",
        input=Review,
        authority=["approver"],
        scope={"document": ctx.input["document"]},
        evidence=document(ctx.input["document"]),
        expires_in=3600,
        reason="review the document",
    )
    ctx.state["verdict"] = answer.input.verdict if isinstance(answer.input, Review) else None
    return None


@review.revalidate("review")
def reread(context: RevalidationContext) -> Any:
    return document(context.input["document"])


# A run that fails for good while its gate file is missing, and passes once it exists: what an
# operator's ``runs retry`` is for.
retried = Flow("cli_retried", version=1)


@retried.step(retries=0)
def attempt(ctx: StepContext) -> None:
    if not Path(ctx.input["gate"]).exists():
        raise RuntimeError(f"gate {ctx.input['gate']} is missing")
    ctx.state["passed"] = True
    return None
