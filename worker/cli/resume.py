"""``interlude resume``: build (or read) a resume.v1 contract, confirm it, submit it once."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from models.enums import ResumeOutcome
from worker.cli.exits import BAD_INPUT, RESUME_EXIT, CliError, resume_exit
from worker.cli.inputs import TOKEN_ENV, confirm, credential, parse_json, parse_object
from worker.cli.interrupt_commands import contract
from worker.cli.lookup import resolve_interrupt
from worker.cli.output import Output, error, note
from worker.cli.parser import (
    Parser,
    Subparsers,
    bounded_float,
    bounded_text,
    id_text,
    name_text,
    verb,
)
from worker.cli.review import MESSAGE_LIMIT, decision_of, review_input, summary_lines
from worker.present.formats import compact

if TYPE_CHECKING:
    from models.contracts import InterruptView, ResumeResult

DEFAULT_EXPIRES_IN = 900.0
# A contract is for now, not for later: its expiry is at most a week away.
MAX_EXPIRES_IN = 7 * 86400.0
_BUILD_ONLY = (
    "actor",
    "decision",
    "approve",
    "edit",
    "reject",
    "message",
    "input",
    "idempotency_key",
)


def register(sub: Subparsers, common: Parser) -> None:
    parser = verb(
        sub,
        "resume",
        _resume,
        "release an interrupt with a resume.v1 contract",
        common,
        description=(
            "Release an interrupt. Either name the interrupt and the decision (the contract is "
            "bound to the checkpoint, scope and evidence hash the interrupt shows), or submit a "
            f"filled-in contract with --contract FILE. The credential comes from {TOKEN_ENV} "
            "or a hidden prompt, never from an argument.\n\n"
            "A tool-call review (an agent's proposed call) takes --approve (as proposed), "
            "--edit '{\"amount\": 250}' (the proposed arguments with these changed; the edited "
            "call is authorized again) or --reject --message '...' (the agent is told why)."
        ),
    )
    parser.add_argument(
        "interrupt_id",
        metavar="INTERRUPT_ID",
        type=id_text,
        nargs="?",
        help="the interrupt's id or a unique prefix (6+)",
    )
    parser.add_argument("--actor", metavar="A", type=name_text, help="your actor id")
    parser.add_argument("--decision", choices=["approved", "rejected"], help="the decision")
    parser.add_argument(
        "--approve", action="store_true", help="approve: the same as --decision approved"
    )
    parser.add_argument(
        "--reject", action="store_true", help="reject: the same as --decision rejected"
    )
    parser.add_argument(
        "--edit",
        metavar="JSON|@FILE",
        help="approve a reviewed tool call with these arguments changed (laid over the "
        "proposed ones)",
    )
    parser.add_argument(
        "--message",
        metavar="TEXT",
        type=bounded_text(MESSAGE_LIMIT, "message"),
        help="with --reject of a tool-call review: why, for the agent to hear",
    )
    parser.add_argument("--input", metavar="JSON|@FILE", help="the input the interrupt asks for")
    parser.add_argument(
        "--idempotency-key", metavar="K", type=name_text, help="retry safely with the same key"
    )
    parser.add_argument(
        "--actor-type",
        choices=["human", "service"],
        default="human",
        help="who the actor is",
    )
    parser.add_argument(
        "--expires-in",
        metavar="SECONDS",
        type=bounded_float(MAX_EXPIRES_IN),
        default=DEFAULT_EXPIRES_IN,
        help="how long the contract stays valid",
    )
    parser.add_argument("--contract", metavar="FILE", help="submit this contract file instead")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _resume(args: argparse.Namespace, out: Output) -> int:
    from worker import submit_resume

    payload = _from_file(args) if args.contract else _built(args)
    interrupt = _interrupt_of(payload)
    _check_input(payload, interrupt)
    summary = _summary(payload, interrupt)
    if out.as_json:
        if not args.yes:
            for line in summary:
                note(line)
    else:
        for line in summary:
            out.line(line)
    confirm("Submit this resume?", assume_yes=args.yes)
    actor = payload.get("actor") if isinstance(payload, dict) else None
    token = credential(actor.get("id") if isinstance(actor, dict) else None)
    result = submit_resume(payload, token)
    return _report(result, payload, out)


def _from_file(args: argparse.Namespace) -> Any:
    given = [f"--{name.replace('_', '-')}" for name in _BUILD_ONLY if getattr(args, name)]
    if args.interrupt_id:
        given.insert(0, "INTERRUPT_ID")
    if given:
        raise CliError(f"--contract cannot be combined with {', '.join(given)}", BAD_INPUT)
    return parse_json(f"@{args.contract}", "--contract")


def _built(args: argparse.Namespace) -> dict[str, Any]:
    from worker import get_interrupt

    decision = decision_of(args)
    missing = [
        label
        for label, value in (
            ("INTERRUPT_ID", args.interrupt_id),
            ("--actor", args.actor),
            ("--decision (or --approve, --edit, --reject)", decision),
        )
        if not value
    ]
    if missing:
        raise CliError(
            f"resume needs {', '.join(missing)} (or --contract FILE); see interlude resume --help",
            BAD_INPUT,
        )
    assert decision is not None  # (missing otherwise)
    value = parse_object(args.input, "--input")
    edit = parse_object(args.edit, "--edit") if args.edit is not None else None
    interrupt = get_interrupt(resolve_interrupt(args.interrupt_id))
    reviewed = review_input(interrupt, edit=edit, message=args.message)
    return contract(
        interrupt,
        actor_id=args.actor,
        actor_type=args.actor_type,
        decision=decision,
        input=reviewed if reviewed is not None else value,
        idempotency_key=args.idempotency_key,
        expires_in=timedelta(seconds=args.expires_in),
    )


def _interrupt_of(payload: Any) -> InterruptView | None:
    """The interrupt a contract names, if it names one that exists (else the gateway tells)."""
    from models.errors import InterludeError
    from worker import get_interrupt

    if not isinstance(payload, dict) or not isinstance(payload.get("interrupt_id"), str):
        return None  # malformed: the gateway records it as such
    try:
        return get_interrupt(payload["interrupt_id"])
    except InterludeError:
        return None  # an unknown interrupt is the gateway's to record (stale)


def _check_input(payload: Any, interrupt: InterruptView | None) -> None:
    """Refuse an input the interrupt's schema rejects before anyone is asked for anything.

    Nothing is submitted, so no attempt is recorded; the gateway checks again on submission.
    Only possible where the schema is registered (INTERLUDE_FLOWS); elsewhere the gateway tells.
    """
    from worker.flows.flow import load_flow_modules
    from worker.flows.schemas import input_problems

    if interrupt is None or not isinstance(payload, dict):
        return
    if payload.get("decision") == "rejected" and not payload.get("input"):
        return
    load_flow_modules()
    problems = input_problems(interrupt.schema_name, interrupt.schema_version, payload.get("input"))
    if problems is not None:
        raise CliError(
            f"invalid input for {interrupt.schema_id}: {problems}; nothing was submitted",
            RESUME_EXIT[ResumeOutcome.INVALID_INPUT],
        )


def _summary(payload: Any, interrupt: InterruptView | None) -> list[str]:
    """What the contract releases, read from the contract itself (it may be malformed)."""
    if not isinstance(payload, dict):
        return [f"contract: {compact(payload)} (not a JSON object)"]
    actor = payload.get("actor")
    who = (
        f"{actor.get('type', '?')}:{actor.get('id', '?')}"
        if isinstance(actor, dict)
        else compact(actor)
    )
    lines = [
        f"release interrupt {payload.get('interrupt_id', '?')} of run "
        f"{payload.get('run_id', '?')} at checkpoint {payload.get('checkpoint_id', '?')}",
        f"  decision {payload.get('decision', '?')} by {who}",
        *(summary_lines(interrupt.review, payload) if interrupt and interrupt.review else []),
        f"  input {compact(payload.get('input', {}))}",
        f"  scope {compact(payload.get('scope'))}",
        f"  evidence hash {payload.get('evidence_hash', '?')}",
        f"  idempotency key {payload.get('idempotency_key', '?')}, "
        f"contract expires {payload.get('expires_at', '?')}",
    ]
    return lines


def _report(result: ResumeResult, payload: Any, out: Output) -> int:
    status = resume_exit(result.outcome, result.original_outcome)
    if out.as_json:
        out.json({**result.model_dump(mode="json"), "exit_status": status, "contract": payload})
    elif result.outcome is ResumeOutcome.ACCEPTED:
        out.line(
            f"accepted (attempt {result.attempt_id}): {result.reason}; run {result.run_id} "
            "continues"
        )
    elif result.outcome is ResumeOutcome.DUPLICATE and status == 0:
        out.line(f"{result.reason}: nothing changed (attempt {result.attempt_id})")
    if status != 0:
        message = f"resume refused ({result.outcome.value}): {result.reason}"
        if result.new_interrupt_id:
            message += f"; review interrupt {result.new_interrupt_id} instead"
        error(message, status)
    return status
