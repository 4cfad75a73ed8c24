"""Flows for ask groups: several interrupts asked by one step, released by all, any or k."""

from __future__ import annotations

from typing import Any

from tests.flows.agents import Go
from tests.flows.interrupts import scratch_redis
from worker import Flow, StepContext

signoff = Flow("signoff", version=1)

TEAMS = ("finance", "legal", "security")


@signoff.step()
def collect(ctx: StepContext) -> None:
    teams = ctx.input.get("teams", ["finance", "legal"])
    policies = ctx.input.get("on_expiry", {})
    asks: dict[str, dict[str, Any]] = {
        team: {
            "kind": "approval",
            "input": Go,
            "authority": [team],
            # Read at every execution: a test changes it to see the binding at the act.
            "evidence": {"amount": int(scratch_redis().get(f"amount:{ctx.run_id}") or 100)},
            "expires_in": 3600 * (1 + TEAMS.index(team)),
            "on_expiry": policies.get(team, "expire"),
            **({"default": {"note": "by default"}} if policies.get(team) == "default" else {}),
        }
        for team in teams
    }
    need = ctx.input.get("need", "all")
    answers = ctx.ask_all(asks, need=need, group="signoff")
    ctx.state["answered"] = sorted(answers)
    ctx.state["approved"] = sorted(name for name, a in answers.items() if a.approved)
