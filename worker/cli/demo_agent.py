"""``interlude demo agent``: an agent's proposed tool calls reviewed by people, narrated.

The story of ``examples/agent.py`` on the demo's stage (``worker.cli.demo.run_story``): the model
proposes a refund too large for a support lead, a finance lead rejects it with a message, the
model proposes again, a support lead's edit beyond her authority is denied, her edit within
it runs once, exactly as approved.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from models.contracts import InterruptView, ResumeContract, ResumeResult
from models.settings import Settings
from worker.cli.demo import DemoError, run_story, say, wait_until
from worker.cli.review import call_text, changes

FLOW_MODULE = "examples.agent"
ORDER = "A-1001"
CUSTOMER_MESSAGE = (
    f"Order {ORDER} arrived with one of the four gate valves cracked. I want a refund."
)
REJECTION = "Only one of the four valves is damaged: refund that one, not the whole order."
EDIT_BEYOND = 3100  # a typo: above 1,000, for a finance lead only
EDIT_WITHIN = 330  # the valve and its shipping
FINISHED = {"succeeded", "failed", "cancelled", "expired"}


def run_agent_demo() -> int:
    """Tell the story; 0 when it ends as narrated, 1 (one line on stderr) otherwise."""
    title = "interlude demo agent: a support agent proposes refunds, people review each call"
    return run_story(FLOW_MODULE, title, _story)


def _answer(
    interrupt: InterruptView, actor: str, credential: str, decision: str, input: dict[str, Any]
) -> ResumeResult:
    from worker import submit_resume

    contract = ResumeContract.for_interrupt(
        interrupt,
        actor=actor,
        decision=decision,
        input=input,
        idempotency_key=f"demo-{uuid.uuid4().hex}",
    )
    return submit_resume(contract, credential)


def _expect(result: ResumeResult, outcome: str) -> None:
    if result.outcome != outcome:
        raise DemoError(f"expected {outcome}, got {result.outcome}: {result.reason}")


def _story(settings: Settings) -> None:
    from examples import agent
    from worker import add_actor, enqueue_run, get_run
    from worker.runs import list_events

    def review(run_id: str, after: str | None = None) -> InterruptView | None:
        run = get_run(run_id)
        if run.state in FINISHED:
            raise DemoError(f"run {run_id} ended {run.state} before its review: {run.error}")
        waiting = [i for i in run.pending_interrupts if i.id != after and i.review]
        return waiting[0] if waiting else None

    def finished(run_id: str) -> str | None:
        state = get_run(run_id).state
        return state if state in FINISHED else None

    fay = add_actor("fay", [agent.FINANCE_LEAD])
    sam = add_actor("sam", [agent.SUPPORT_LEAD])
    say(
        f"actors: sam ({agent.SUPPORT_LEAD}: refunds up to {agent.LARGE_REFUND:,} EUR) and fay "
        f"({agent.FINANCE_LEAD}: any refund); the policy is a function of the call"
    )
    model = _configured() or "scripted (no network; AGENT_MODEL=module:function for another)"
    run_id = enqueue_run(
        "support_agent", {"customer": "C-17", "message": CUSTOMER_MESSAGE}, started_by="C-17"
    )
    say(f"[1] run started: {run_id}; the customer writes: {CUSTOMER_MESSAGE!r}")
    say(f"    the model: {model}")

    first = wait_until("the first proposal", lambda: review(run_id))
    assert first.review is not None
    say(
        f"[2] the model proposes {call_text(first.review.tool, first.review.args)}: the run "
        f"waits for a review by {', '.join(first.roles)} (refunds above "
        f"{agent.LARGE_REFUND:,} EUR); it holds no worker meanwhile"
    )
    rejected = _answer(first, "fay", fay, "rejected", {"message": REJECTION})
    _expect(rejected, "accepted")
    say(
        f"[3] fay rejects it: {REJECTION!r} -> {rejected.outcome}; nothing ran, and her message "
        "goes back into the conversation"
    )

    second = wait_until("the second proposal", lambda: review(run_id, after=first.id))
    assert second.review is not None
    proposed = second.review.args
    say(
        f"[4] the model proposes again: {call_text(second.review.tool, proposed)}; "
        f"reviewable by {', '.join(second.roles)}"
    )
    beyond = {**proposed, "amount": EDIT_BEYOND}
    denied = _answer(second, "sam", sam, "approved", {"args": beyond})
    _expect(denied, "denied")
    say(
        f"[5] sam edits it ({changes(proposed, beyond)}) and approves -> {denied.outcome}: "
        f"{denied.reason}; the refusal is recorded (attempt {denied.attempt_id})"
    )
    within = {**proposed, "amount": EDIT_WITHIN}
    accepted = _answer(second, "sam", sam, "approved", {"args": within})
    _expect(accepted, "accepted")
    say(
        f"    sam edits it ({changes(proposed, within)}: the valve and its shipping) -> "
        f"{accepted.outcome}: the edited call is authorized for what it became"
    )

    state = wait_until("the run to finish", lambda: finished(run_id))
    run = get_run(run_id)
    if state != "succeeded":
        raise DemoError(f"run {run_id} ended {state}: {run.error}")
    refunds = agent.refunds_for(ORDER)
    if [r["amount"] for r in refunds] != [EDIT_WITHIN]:
        raise DemoError(f"expected one refund of {EDIT_WITHIN}, found {refunds}")
    executions = sum(1 for e in list_events(run_id) if e.trigger == "claim")
    say(
        f"[6] effect applied once: refund {refunds[0]['id']} of {refunds[0]['amount']} EUR for "
        f"{ORDER}, exactly the call sam approved; the step ran {executions} times (again after "
        "each review) and replayed its earlier turns from ctx.remember, not from the model"
    )
    say(f"[7] finished: run {run_id} {state}; the agent replies: {run.output['reply']!r}")
    say()
    say("Look around (same database):")
    say(f"  INTERLUDE_DATABASE_URL={settings.database_url} interlude runs show {run_id}")
    say(
        f"  INTERLUDE_DATABASE_URL={settings.database_url} interlude interrupts list --run {run_id}"
    )


def _configured() -> str:
    from examples.agent import MODEL_ENV

    return os.environ.get(MODEL_ENV, "").strip()
