"""The flow the throughput benchmark runs: three trivial steps."""

from __future__ import annotations

from worker import Flow, StepContext

flow = Flow("bench_three_steps", version=1)


@flow.step()
def first(ctx: StepContext) -> str:
    ctx.state["trail"] = ["first"]
    return "second"


@flow.step()
def second(ctx: StepContext) -> str:
    ctx.state["trail"].append("second")
    return "third"


@flow.step()
def third(ctx: StepContext) -> None:
    ctx.state["trail"].append("third")
    return None
