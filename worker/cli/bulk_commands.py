"""``interlude resume-many``: answer several open interrupts of one kind together.

Every interrupt's evidence is printed before the one confirmation; each is then answered by
its own contract, bound to what was printed, and each outcome is printed.
"""

from __future__ import annotations

import argparse

from models.enums import InterruptKind, ResumeOutcome
from worker.cli.exits import RESUME_EXIT, resume_exit
from worker.cli.inputs import TOKEN_ENV, confirm, credential, parse_object
from worker.cli.lookup import resolve_interrupt
from worker.cli.output import Output, note
from worker.cli.parser import Parser, Subparsers, choice_of, id_text, name_text, verb
from worker.present.formats import compact


def register(sub: Subparsers, common: Parser) -> None:
    parser = verb(
        sub,
        "resume-many",
        _resume_many,
        "answer several open interrupts of one kind together, each by its own contract",
        common,
        description=(
            "Answer several open interrupts of one kind together: name them, or take --all of a\n"
            "--kind that --actor may answer. Every evidence is printed before you confirm; each\n"
            "interrupt is then answered by its own resume.v1 contract bound to what was printed,\n"
            f"and each outcome is printed. The credential comes from {TOKEN_ENV} or a prompt."
        ),
    )
    parser.add_argument("interrupt_ids", metavar="INTERRUPT_ID", type=id_text, nargs="*")
    parser.add_argument("--actor", metavar="A", type=name_text, required=True)
    parser.add_argument("--decision", choices=["approved", "rejected"], required=True)
    parser.add_argument(
        "--kind",
        metavar="K",
        type=choice_of(InterruptKind, "kind"),
        help="with --all: the kind to answer",
    )
    parser.add_argument(
        "--all", action="store_true", help="every open interrupt of --kind the actor may answer"
    )
    parser.add_argument("--input", metavar="JSON|@FILE", help="the input given to each")
    parser.add_argument("--actor-type", choices=["human", "service"], default="human")
    parser.add_argument("--yes", action="store_true", help="do not ask for confirmation")


def _resume_many(args: argparse.Namespace, out: Output) -> int:
    from models.errors import InvalidInputError
    from worker.gateway.bulk_review import MAX_BATCH, Shown, answer_together, select_for_review

    if args.all == bool(args.interrupt_ids) or (args.all and not args.kind):
        raise InvalidInputError(detail="name interrupts, or give --all with --kind (not both)")
    ids = (
        _all_of(args.actor, args.kind, MAX_BATCH)
        if args.all
        else [resolve_interrupt(i) for i in args.interrupt_ids]
    )
    found = select_for_review(ids)
    value = parse_object(args.input, "--input") if args.input else None
    for n, interrupt in enumerate(found, 1):
        lines = [
            f"{n}. {interrupt.id} {interrupt.kind}: {interrupt.reason or interrupt.name}",
            f"   run {interrupt.run_id}, step {interrupt.step}",
            f"   evidence {compact(interrupt.evidence)}",
            f"   scope {compact(interrupt.scope)}",
        ]
        for line in lines:
            # With --json, stdout holds the results only: the evidence goes to stderr.
            note(line) if out.as_json else out.line(line)
    confirm(f"{args.decision} these {len(found)} interrupts?", assume_yes=args.yes)
    token = credential(args.actor)
    results = answer_together(
        [Shown.of(i) for i in found],
        actor=args.actor,
        credential=token,
        decision=args.decision,
        input=value,
        actor_type=args.actor_type,
    )
    statuses = [resume_exit(r.outcome, r.original_outcome) for r in results]
    if out.as_json:
        out.json([r.model_dump(mode="json") for r in results])
    else:
        out.table(
            ["interrupt", "outcome", "attempt", "reason"],
            [(r.interrupt_id, r.outcome.value, r.attempt_id, r.reason) for r in results],
            title=f"{sum(r.outcome is ResumeOutcome.ACCEPTED for r in results)} of "
            f"{len(results)} accepted",
        )
    # The first refusal's status, so a script sees that not all were accepted.
    return next((s for s in statuses if s != 0), RESUME_EXIT[ResumeOutcome.ACCEPTED])


def _all_of(actor: str, kind: str, limit: int) -> list[str]:
    from models.identity import normal_actor_id
    from models.inbox_queries import MAX_PAGE, answerable_interrupts
    from worker.gateway.actors import list_actors

    who = normal_actor_id(actor)
    roles = next((a.roles for a in list_actors() if a.id == who and a.revoked_at is None), [])
    page = answerable_interrupts(roles, actor_id=who, kind=kind, limit=min(limit, MAX_PAGE))
    return [i.id for i in page.items]
