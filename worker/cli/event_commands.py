"""``interlude events send``: send a run an event (kept until it asks, if it does not yet)."""

from __future__ import annotations

import argparse
import uuid

from worker.cli.exits import resume_exit
from worker.cli.inputs import credential, parse_object
from worker.cli.lookup import resolve_run
from worker.cli.output import Output, error
from worker.cli.parser import Parser, Subparsers, group, id_text, name_text, verb


def register(sub: Subparsers, common: Parser) -> None:
    events = group(sub, "events", "send events to runs")
    parser = verb(
        events,
        "send",
        _send,
        "send a run an event its flow declares",
        common,
        description=(
            "Send RUN_ID the event NAME with a JSON payload, as an actor holding one of the "
            "event's roles. A run waiting on the event goes on; one that does not wait on it "
            "yet keeps it until it asks. Retry with the same --idempotency-key: a second send "
            "is a duplicate."
        ),
    )
    parser.add_argument("run_id", metavar="RUN_ID", type=id_text, help="the run (or a prefix)")
    parser.add_argument("name", metavar="NAME", type=name_text, help="the event's name")
    parser.add_argument("--payload", metavar="JSON|@FILE", required=True, help="the payload")
    parser.add_argument("--actor", metavar="A", type=name_text, required=True, help="your actor id")
    parser.add_argument(
        "--actor-type", choices=["human", "service"], default="service", help="who the actor is"
    )
    parser.add_argument(
        "--idempotency-key", metavar="K", type=name_text, help="retry safely with the same key"
    )


def _send(args: argparse.Namespace, out: Output) -> int:
    from worker import send_event

    payload = parse_object(args.payload, "--payload")
    run_id = resolve_run(args.run_id)
    key = args.idempotency_key or uuid.uuid4().hex
    result = send_event(
        run_id,
        args.name,
        payload,
        actor=args.actor,
        actor_type=args.actor_type,
        credential=credential(args.actor),
        idempotency_key=key,
    )
    status = resume_exit(result.outcome, result.original_outcome)
    if out.as_json:
        out.json({**result.model_dump(mode="json"), "exit_status": status})
    elif status == 0:
        out.line(f"{result.outcome.value} (attempt {result.attempt_id}): {result.reason}")
    if status != 0:
        error(f"event refused ({result.outcome.value}): {result.reason}", status)
    return status
