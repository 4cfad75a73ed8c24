"""``interlude interrupts``: the operators' work queue and what each interrupt asks for."""

from __future__ import annotations

import argparse
import uuid
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from models.enums import InterruptKind, InterruptStatus
from worker.cli.attempts import register as register_attempts
from worker.cli.exits import OK
from worker.cli.lookup import resolve_interrupt, resolve_run
from worker.cli.output import Output
from worker.cli.parser import (
    Parser,
    Subparsers,
    choice_of,
    group,
    id_text,
    one_of,
    positive_int,
    verb,
)
from worker.cli.review import resume_hint, show_call
from worker.present.formats import age, format_age, jsonable, seconds_since, timestamp, until

if TYPE_CHECKING:
    from models.contracts import InterruptView, NotificationView

DEFAULT_LIMIT = 200
TEMPLATE_EXPIRES_IN = timedelta(hours=1)
ACTOR_PLACEHOLDER = "<your actor id>"
PENDING = InterruptStatus.PENDING.value


def register(sub: Subparsers, common: Parser) -> None:
    interrupts = group(sub, "interrupts", "list and inspect interrupts (oldest first)")

    listing = verb(interrupts, "list", _list, "interrupts, oldest first: the work queue", common)
    listing.add_argument(
        "--status",
        metavar="S",
        type=choice_of(InterruptStatus, "status"),
        help=f"only interrupts in this status: {one_of(InterruptStatus)}",
    )
    listing.add_argument(
        "--kind",
        metavar="K",
        type=choice_of(InterruptKind, "kind"),
        help=f"only interrupts of this kind: {one_of(InterruptKind)}",
    )
    listing.add_argument(
        "--run",
        metavar="RUN_ID",
        type=id_text,
        help="only this run's interrupts (id or unique prefix)",
    )
    listing.add_argument(
        "--limit", metavar="N", type=positive_int, default=DEFAULT_LIMIT, help="at most N"
    )

    show = verb(
        interrupts,
        "show",
        _show,
        "what an interrupt asks for, and a resume.v1 contract template to fill in",
        common,
    )
    show.add_argument(
        "interrupt_id",
        metavar="INTERRUPT_ID",
        type=id_text,
        help="the interrupt's id or a unique prefix (6+)",
    )
    register_attempts(interrupts, common, of="interrupt")


def contract(
    interrupt: InterruptView,
    *,
    actor_id: str,
    actor_type: str = "human",
    decision: str = "approved",
    input: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    expires_in: timedelta = TEMPLATE_EXPIRES_IN,
) -> dict[str, Any]:
    """A ``resume.v1`` contract bound to what ``interrupt`` shows: checkpoint, scope, evidence."""
    # Imported here: pydantic is not needed to parse a command line or print --help.
    from models.contracts import contract_payload

    return contract_payload(
        interrupt,
        actor=actor_id,
        actor_type=actor_type,
        decision=decision,
        input=input,
        idempotency_key=idempotency_key or new_key(interrupt.id),
        expires_in=expires_in,
    )


def new_key(interrupt_id: str) -> str:
    return f"cli-{interrupt_id[:12]}-{uuid.uuid4().hex[:12]}"


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker import list_interrupts
    from worker.ops.waiting import waiting_since

    run_id = resolve_run(args.run) if args.run else None
    found = list_interrupts(run_id=run_id, status=args.status, kind=args.kind, limit=args.limit)
    since = waiting_since({i.run_id for i in found if i.status == PENDING})
    waited = {i.id: _waited(i, since) for i in found}
    if out.as_json:
        out.json([{**jsonable(i), "waiting_seconds": waited[i.id]} for i in found])
        return OK
    out.table(
        ["interrupt", "run", "kind", "name", "status", "age", "deadline", "roles"],
        [
            (
                out.id(i.id),
                out.id(i.run_id),
                i.kind,
                # An ask of a group says so: its group and how many of it are needed.
                i.name if i.ask_group is None else f"{i.name} [{i.ask_group}: {i.group_need}]",
                i.status,
                f"waiting {format_age(waited[i.id] or 0)}"
                if waited[i.id] is not None
                else f"{age(i.created_at)} old",
                until(i.deadline) if i.status == "pending" else timestamp(i.deadline),
                ", ".join(i.roles),
            )
            for i in found
        ],
        title=f"interrupts ({len(found)})",
        keep=("interrupt", "run"),
    )
    return OK


def _waited(interrupt: InterruptView, since: dict[str, datetime]) -> float | None:
    """A pending interrupt shows how long its run has waited (the run's figure, not its own)."""
    if interrupt.status != PENDING:
        return None
    start = since.get(interrupt.run_id, interrupt.created_at)
    return round(seconds_since(start), 3)


def _notifications(notifications: list[NotificationView]) -> str:
    """Each notifier and where its notification stands: ``tell_chat owed (attempt 2)``."""
    shown = []
    for n in notifications:
        said = f"{n.notifier} {n.status}"
        if n.status in ("owed", "failed"):
            said += f" (attempt {n.attempt}{', ' + n.error if n.error else ''})"
        shown.append(said)
    return "; ".join(shown)


def _show(args: argparse.Namespace, out: Output) -> int:
    from worker import get_interrupt
    from worker.interrupts import list_notifications
    from worker.ops.waiting import waiting_since

    interrupt = get_interrupt(resolve_interrupt(args.interrupt_id))
    template = contract(interrupt, actor_id=ACTOR_PLACEHOLDER)
    waited = _waited(interrupt, waiting_since([interrupt.run_id]))
    notifications = list_notifications(interrupt.run_id, interrupt.id)
    if out.as_json:
        out.json(
            {
                "interrupt": {**jsonable(interrupt), "waiting_seconds": waited},
                "notifications": [jsonable(n) for n in notifications],
                "template": template,
            }
        )
        return OK
    status = interrupt.status
    if waited is not None:
        status += f", waiting {format_age(waited)}"
    out.pairs(
        [
            ("interrupt", interrupt.id),
            ("run", interrupt.run_id),
            ("kind", f"{interrupt.kind} ({interrupt.name!r} in step {interrupt.step})"),
            ("status", status),
            ("reason", interrupt.reason or "-"),
            ("roles", ", ".join(interrupt.roles)),
            ("separate from starter", "yes" if interrupt.separate_from_starter else "no"),
            ("input schema", interrupt.schema_id),
            ("checkpoint", interrupt.checkpoint_id),
            ("evidence hash", interrupt.evidence_hash),
            ("deadline", f"{timestamp(interrupt.deadline)} ({until(interrupt.deadline)})"),
            ("on expiry", interrupt.on_expiry),
            ("decision", interrupt.decision or "-"),
            ("resolved by", interrupt.resolved_by or "-"),
            ("supersedes", interrupt.supersedes or "-"),
            ("superseded by", interrupt.superseded_by or "-"),
            *(
                [("ask group", f"{interrupt.ask_group} (needs {interrupt.group_need})")]
                if interrupt.ask_group is not None
                else []
            ),
            *([("policy version", interrupt.policy_version)] if interrupt.policy_version else []),
            *([("notifications", _notifications(notifications))] if notifications else []),
        ]
    )
    show_call(out, interrupt)
    out.block("scope", interrupt.scope)
    out.block("evidence", interrupt.evidence)
    out.block("required input (JSON Schema)", interrupt.json_schema)
    if interrupt.previous_input is not None:
        out.block("input given before the evidence changed", interrupt.previous_input)
    out.block("resume contract template (resume.v1)", template)
    for line in resume_hint(interrupt):
        out.line(line)
    return OK
