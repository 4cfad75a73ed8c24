"""Tool-call reviews on the command line: approve, edit or reject a call an agent proposed.

A review interrupt (``ctx.review_call``) asks for ``{"args": ..., "message": ...}``:
``--approve`` sends no arguments (the call as proposed), ``--edit`` the proposed arguments
with the given ones laid over them, ``--reject --message`` a rejection the agent is told.
"""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING, Any

from worker.cli.exits import BAD_INPUT, CliError

if TYPE_CHECKING:
    from models.contracts import InterruptView, ProposedCall
    from worker.cli.output import Output

# What a rejection may tell the agent (the review input's ``message``, LONGEST_MESSAGE).
MESSAGE_LIMIT = 4000
# A value longer than this is cut in the one-line form of a call.
SHOWN_VALUE = 60
_SHORTHANDS = ("approve", "edit", "reject")


def decision_of(args: argparse.Namespace) -> str | None:
    """The decision the options ask for; CliError when they ask for more than one."""
    given = [f"--{name}" for name in _SHORTHANDS if _given(args, name)]
    if args.decision:
        given.insert(0, "--decision")
    if len(given) > 1:
        raise CliError(f"choose one of {', '.join(given)}: each is a decision", BAD_INPUT)
    if args.message is not None and not (args.reject or args.decision == "rejected"):
        raise CliError(
            "--message goes with --reject: it tells the agent why its call was rejected",
            BAD_INPUT,
        )
    for option in ("edit", "message"):
        if _given(args, option) and args.input is not None:
            raise CliError(
                f"--{option} cannot be combined with --input: it is the review's input",
                BAD_INPUT,
            )
    if args.approve or args.edit is not None:
        return "approved"
    if args.reject:
        return "rejected"
    decision: str | None = args.decision
    return decision


def _given(args: argparse.Namespace, name: str) -> bool:
    value = getattr(args, name)
    return value is not None and value is not False


def review_input(
    interrupt: InterruptView, *, edit: dict[str, Any] | None, message: str | None
) -> dict[str, Any] | None:
    """The input ``--edit`` or ``--message`` stand for (None when neither is given).

    An edit is laid over the arguments as proposed, so a responder changes one field by
    naming only that one; the gateway validates the result and authorizes the call it became.
    """
    if edit is None and message is None:
        return None
    call = interrupt.review
    if call is None:
        option = "--edit" if edit is not None else "--message"
        raise CliError(
            f"{option} is for a tool-call review; interrupt {interrupt.id} asks for "
            f"{interrupt.schema_id}: give --input instead",
            BAD_INPUT,
        )
    if edit is not None:
        return {"args": {**call.args, **edit}}
    return {"message": message}


def call_text(tool: str, args: Any) -> str:
    """A call on one line, as code reads: ``refund(order="B-7", amount=250)``."""
    if not isinstance(args, dict):
        return f"{tool}({_value(args)})"
    return f"{tool}({', '.join(f'{name}={_value(value)}' for name, value in args.items())})"


def _value(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= SHOWN_VALUE else text[: SHOWN_VALUE - 1] + "…"


def changes(before: dict[str, Any], after: Any) -> str:
    """What an edit changed, field by field: ``amount 300 -> 250``."""
    if not isinstance(after, dict):
        return "the arguments replaced"
    changed = [
        f"{name} {_value(before.get(name))} -> {_value(after.get(name))}"
        for name in dict.fromkeys([*before, *after])
        if before.get(name) != after.get(name)
    ]
    return ", ".join(changed) or "nothing"


def summary_lines(call: ProposedCall, payload: dict[str, Any]) -> list[str]:
    """What a contract does to the call it reviews, for the confirmation."""
    given = payload.get("input")
    answer = given if isinstance(given, dict) else {}
    if payload.get("decision") == "rejected":
        lines = [f"  reject the call {call_text(call.tool, call.args)}"]
        if answer.get("message"):
            lines.append(f"  message to the agent: {answer['message']}")
        return lines
    edited = answer.get("args")
    if edited is None:
        return [f"  approve the call {call_text(call.tool, call.args)} as proposed"]
    return [
        f"  approve the call {call_text(call.tool, edited)}",
        f"  edited: {changes(call.args, edited)}",
    ]


def show_call(out: Output, interrupt: InterruptView) -> None:
    """``interrupts show`` for a review: the call, and how to answer it."""
    call = interrupt.review
    if call is None:
        return
    out.line(f"proposed call: {call_text(call.tool, call.args)}")
    answer = interrupt.resume_input or {}
    if interrupt.decision == "approved" and answer.get("args") is not None:
        out.line(f"approved as edited: {call_text(call.tool, answer['args'])}")
        out.line(f"  edited: {changes(call.args, answer['args'])}")
    elif interrupt.decision == "rejected" and answer.get("message"):
        out.line(f"rejected, telling the agent: {answer['message']}")
    out.block("arguments as proposed", call.args)


def resume_hint(interrupt: InterruptView) -> list[str]:
    """How to answer this interrupt with ``interlude resume``."""
    start = f"interlude resume {interrupt.id} --actor ID"
    if interrupt.review is None:
        return [
            f"resume with: {start} --decision approved --input '{{...}}'   "
            "(or fill in the template: interlude resume --contract FILE)"
        ]
    args = interrupt.review.args
    # The example edits a number if the call has one: an amount, a count.
    numbers = [k for k, v in args.items() if isinstance(v, int | float) and v is not True]
    first = next(iter(numbers or args), "field")
    return [
        f"resume with: {start} --approve   (the call as proposed)",
        f"         or: {start} --edit '{{\"{first}\": ...}}'   "
        "(changed arguments, laid over the proposed ones)",
        f"         or: {start} --reject --message '...'   (the agent is told why)",
    ]
