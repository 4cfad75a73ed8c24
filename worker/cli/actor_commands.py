"""``interlude actors``: responders, their roles and their one-time credentials."""

from __future__ import annotations

import argparse

from worker.cli.exits import OK
from worker.cli.output import Output
from worker.cli.parser import Parser, Subparsers, group, name_text, verb
from worker.present.formats import timestamp

KINDS = ("human", "service")


def register(sub: Subparsers, common: Parser) -> None:
    actors = group(
        sub, "actors", "add, list, revoke and rotate responders; set their roles and kind"
    )

    add = verb(
        actors, "add", _add, "add a responder and print its credential (once, only now)", common
    )
    add.add_argument("actor_id", metavar="ID", type=name_text)
    _roles(add)
    add.add_argument(
        "--kind",
        choices=KINDS,
        default="human",
        help="a person or a service account (default human); it answers and acts only as that",
    )

    verb(actors, "list", _list, "list responders and their roles", common)

    revoke = verb(actors, "revoke", _revoke, "revoke a responder's credential", common)
    revoke.add_argument("actor_id", metavar="ID", type=name_text)

    rotate = verb(
        actors,
        "rotate",
        _rotate,
        "issue a new credential for a responder (printed once); the old one stops working now",
        common,
    )
    rotate.add_argument("actor_id", metavar="ID", type=name_text)

    roles = verb(actors, "roles", _set_roles, "replace a responder's roles", common)
    roles.add_argument("actor_id", metavar="ID", type=name_text)
    _roles(roles)

    kind = verb(
        actors, "kind", _set_kind, "correct whether a responder is a person or a service", common
    )
    kind.add_argument("actor_id", metavar="ID", type=name_text)
    kind.add_argument("kind", metavar="KIND", choices=KINDS, help="human or service")


def _roles(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--role",
        metavar="R",
        dest="roles",
        type=name_text,
        action="append",
        required=True,
        help="a role (repeat for several)",
    )


def _add(args: argparse.Namespace, out: Output) -> int:
    from worker import add_actor

    # The credential is stored only as a hash: this is the one place it is ever shown.
    secret = add_actor(args.actor_id, args.roles, kind=args.kind)
    actor_id, roles = _stored(args.actor_id)
    if out.as_json:
        out.json({"id": actor_id, "kind": args.kind, "roles": roles, "credential": secret})
        return OK
    out.line(f"actor {actor_id} ({args.kind}) added with roles {', '.join(roles)}")
    out.line(f"credential: {secret}")
    out.line("Store it now: it will not be shown again. Give it to interlude resume via")
    out.line("the INTERLUDE_ACTOR_TOKEN environment variable or its hidden prompt.")
    return OK


def _list(args: argparse.Namespace, out: Output) -> int:
    from worker import list_actors

    found = list_actors()
    if out.as_json:
        out.json(found)
        return OK
    out.table(
        ["actor", "kind", "roles", "created", "status"],
        [
            (
                a.id,
                a.kind,
                ", ".join(a.roles),
                timestamp(a.created_at),
                f"revoked {timestamp(a.revoked_at)}" if a.revoked_at else "active",
            )
            for a in found
        ],
        title=f"actors ({len(found)})",
    )
    return OK


def _revoke(args: argparse.Namespace, out: Output) -> int:
    from worker import revoke_actor

    revoke_actor(args.actor_id)
    if out.as_json:
        out.json({"id": args.actor_id, "revoked": True})
    else:
        out.line(f"actor {args.actor_id} revoked: its credential no longer resumes anything")
    return OK


def _rotate(args: argparse.Namespace, out: Output) -> int:
    from worker import rotate_actor

    secret = rotate_actor(args.actor_id)
    if out.as_json:
        out.json({"id": args.actor_id, "credential": secret})
        return OK
    out.line(f"actor {args.actor_id}: new credential (the old one no longer works)")
    out.line(f"credential: {secret}")
    out.line("Store it now: it will not be shown again.")
    return OK


def _set_roles(args: argparse.Namespace, out: Output) -> int:
    from worker import set_actor_roles

    set_actor_roles(args.actor_id, args.roles)
    actor_id, roles = _stored(args.actor_id)
    if out.as_json:
        out.json({"id": actor_id, "roles": roles})
    else:
        out.line(f"actor {actor_id} now holds roles {', '.join(roles)}")
    return OK


def _set_kind(args: argparse.Namespace, out: Output) -> int:
    from models.identity import normal_actor_id
    from worker import set_actor_kind

    set_actor_kind(args.actor_id, args.kind)
    actor_id = normal_actor_id(args.actor_id)
    if out.as_json:
        out.json({"id": actor_id, "kind": args.kind})
    else:
        out.line(
            f"actor {actor_id} is now a {args.kind}: it answers and acts as {args.kind}:{actor_id}"
        )
    return OK


def _stored(actor_id: str) -> tuple[str, list[str]]:
    """The id and roles as stored (the id in its normal form; the roles trimmed and
    de-duplicated), not as typed: ``Zed.Q`` is stored, and shown, as ``zed.q``."""
    from models.identity import normal_actor_id
    from worker import list_actors

    stored = normal_actor_id(actor_id)
    return stored, next((a.roles for a in list_actors() if a.id == stored), [])
