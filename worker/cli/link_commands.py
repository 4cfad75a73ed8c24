"""``interlude links`` and ``interlude contacts``: answer links and where actors are reached."""

from __future__ import annotations

import argparse

from worker.cli.exits import OK
from worker.cli.lookup import resolve_interrupt
from worker.cli.output import Output
from worker.cli.parser import (
    Parser,
    Subparsers,
    bounded_float,
    group,
    id_text,
    name_text,
    positive_int,
    verb,
)
from worker.present.formats import timestamp

CHANNELS = ("email", "slack")
DECISIONS = ("approved", "rejected")


def register(sub: Subparsers, common: Parser) -> None:
    links = group(sub, "links", "issue, list and revoke answer links (signed, single-use)")
    issue = verb(
        links,
        "issue",
        _issue,
        "issue a responder's answer link to an interrupt and print it (once, only now)",
        common,
    )
    issue.add_argument("interrupt_id", metavar="INTERRUPT_ID", type=id_text)
    issue.add_argument("--actor", metavar="A", type=name_text, required=True, help="responder")
    issue.add_argument(
        "--decision",
        choices=DECISIONS,
        action="append",
        dest="decisions",
        help="a decision the link may make (repeat; default both)",
    )
    issue.add_argument(
        "--expires-in",
        metavar="SECONDS",
        type=bounded_float(100 * 365 * 86400.0),
        help="how long it lives (default INTERLUDE_LINK_SECONDS; never past the deadline)",
    )
    listing = verb(
        links, "list", _list, "answer links, newest first, and what became of each", common
    )
    listing.add_argument("--interrupt", metavar="ID", type=id_text, help="only this interrupt's")
    listing.add_argument("--actor", metavar="A", type=name_text, help="only this responder's")
    listing.add_argument("--limit", metavar="N", type=positive_int, default=200, help="at most N")
    revoke = verb(
        links,
        "revoke",
        _revoke,
        "revoke answer links: one, a responder's or an interrupt's (recording who revoked)",
        common,
    )
    revoke.add_argument("link_id", metavar="LINK_ID", type=id_text, nargs="?")
    revoke.add_argument("--actor", metavar="A", type=name_text, help="all of this responder's")
    revoke.add_argument("--interrupt", metavar="ID", type=id_text, help="all of this interrupt's")
    revoke.add_argument("--by", metavar="WHO", type=name_text, required=True, help="who revokes")

    contacts = group(sub, "contacts", "where responders are reached: e-mail, Slack users")
    add = verb(contacts, "add", _add_contact, "keep an address for a responder", common)
    add.add_argument("actor_id", metavar="ACTOR", type=name_text)
    add.add_argument("channel", metavar="CHANNEL", choices=CHANNELS, help="email or slack")
    add.add_argument("address", metavar="ADDRESS", type=name_text, help="e-mail or Slack member id")
    remove = verb(contacts, "remove", _remove_contact, "forget an address", common)
    remove.add_argument("channel", metavar="CHANNEL", choices=CHANNELS)
    remove.add_argument("address", metavar="ADDRESS", type=name_text)
    shown = verb(contacts, "list", _list_contacts, "addresses kept, by responder", common)
    shown.add_argument("--actor", metavar="A", type=name_text, help="only this responder's")


def _issue(args: argparse.Namespace, out: Output) -> int:
    from worker.gateway.answer_links import issue_links

    interrupt_id = resolve_interrupt(args.interrupt_id)
    (link,) = issue_links(
        interrupt_id,
        [args.actor],
        channel="cli",
        decisions=args.decisions or DECISIONS,
        expires_in=args.expires_in,
    )
    url = link.url()
    if out.as_json:
        out.json(
            {
                "id": link.link_id,
                "interrupt_id": link.interrupt_id,
                "actor": link.actor_id,
                "decisions": list(link.decisions),
                "expires_at": link.expires_at.isoformat(),
                "url": url,
            }
        )
        return OK
    out.line(f"link {link.link_id} for {link.actor_id}: {', '.join(link.decisions)}")
    out.line(f"  until {timestamp(link.expires_at)}")
    out.line(f"url: {url}")
    out.line("Give it to the responder only: whoever holds it answers as them, once.")
    return OK


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker.gateway.answer_links import list_links

    interrupt_id = resolve_interrupt(args.interrupt) if args.interrupt else None
    found = list_links(interrupt_id=interrupt_id, actor_id=args.actor, limit=args.limit)
    if out.as_json:
        out.json([link.__dict__ for link in found])
        return OK
    out.table(
        ["link", "interrupt", "actor", "decisions", "channel", "expires", "status"],
        [
            (
                link.id,
                link.interrupt_id,
                link.actor_id,
                ", ".join(link.decisions),
                link.channel,
                timestamp(link.expires_at),
                f"{link.status} by {link.revoked_by}" if link.revoked_by else link.status,
            )
            for link in found
        ],
        title=f"answer links ({len(found)})",
    )
    return OK


def _revoke(args: argparse.Namespace, out: Output) -> int:
    from worker.gateway.answer_links import revoke_links

    interrupt_id = resolve_interrupt(args.interrupt) if args.interrupt else None
    revoked = revoke_links(
        by=args.by, link_id=args.link_id, actor_id=args.actor, interrupt_id=interrupt_id
    )
    if out.as_json:
        out.json({"revoked": revoked, "by": args.by})
    else:
        out.line(f"{len(revoked)} link(s) revoked by {args.by}")
    return OK


def _add_contact(args: argparse.Namespace, out: Output) -> int:
    from worker.ops.contacts import add_contact

    kept = add_contact(args.actor_id, args.channel, args.address)
    if out.as_json:
        out.json(kept.__dict__)
    else:
        out.line(f"{kept.channel} {kept.address} is kept for actor {kept.actor_id}")
    return OK


def _remove_contact(args: argparse.Namespace, out: Output) -> int:
    from worker.ops.contacts import remove_contact

    remove_contact(args.channel, args.address)
    if out.as_json:
        out.json({"channel": args.channel, "address": args.address, "removed": True})
    else:
        out.line(f"{args.channel} {args.address} removed")
    return OK


def _list_contacts(args: argparse.Namespace, out: Output) -> int:
    from worker.ops.contacts import list_contacts

    found = list_contacts(args.actor)
    if out.as_json:
        out.json([c.__dict__ for c in found])
        return OK
    out.table(
        ["actor", "channel", "address", "added"],
        [(c.actor_id, c.channel, c.address, timestamp(c.created_at)) for c in found],
        title=f"contacts ({len(found)})",
    )
    return OK
