"""Where actors are reached, kept by the operator: e-mail addresses and Slack users.

The e-mail notifier writes to the addresses of the actors who may answer; a Slack callback
answers as the actor its Slack user is kept for here, and as nobody when it is kept for none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy.exc import IntegrityError

from models import actors as actor_store
from models import contacts as store
from models import links as link_store
from models import runs as run_store
from models.contracts import InterruptView
from models.db import transaction, utcnow
from models.enums import ContactChannel
from models.errors import ActorNotFoundError, ContactError
from models.identity import normal_actor_id

# An address as people type one: something@somewhere, no spaces or angle brackets (the
# SMTP server is the judge of the rest).
EMAIL = re.compile(r"^[^\s@<>,;]{1,64}@[^\s@<>,;]{1,253}$")
# A Slack member id (U… or W…, upper-case letters and digits).
SLACK_USER = re.compile(r"^[UW][A-Z0-9]{2,30}$")


@dataclass(frozen=True)
class ContactView:
    actor_id: str
    channel: str
    address: str
    created_at: datetime


def checked_address(channel: str, address: str) -> str:
    """``address`` in its stored form for ``channel``, or ContactError saying what is wrong."""
    if channel not in tuple(ContactChannel):
        raise ContactError(
            address=address, detail=f"unknown channel; one of {', '.join(ContactChannel)}"
        )
    text = address.strip()
    if channel == ContactChannel.EMAIL:
        if not EMAIL.fullmatch(text):
            raise ContactError(address=address, detail="not an e-mail address (name@domain)")
        local, _, domain = text.rpartition("@")
        return f"{local}@{domain.lower()}"
    if not SLACK_USER.fullmatch(text):
        raise ContactError(
            address=address, detail="not a Slack member id (U or W and capitals/digits)"
        )
    return text


def add_contact(actor_id: str, channel: str, address: str) -> ContactView:
    """Keep ``address`` on ``channel`` for the actor; an address kept for anyone is refused."""
    stored = checked_address(channel, address)
    actor = normal_actor_id(actor_id)
    try:
        with transaction() as session:
            if actor_store.get_actor(session, actor) is None:
                raise ActorNotFoundError(actor_id=actor)
            store.add(session, actor, channel, stored)
    except IntegrityError:
        raise ContactError(
            address=stored, detail=f"already kept for an actor on {channel}: remove it first"
        ) from None
    return next(c for c in list_contacts(actor) if (c.channel, c.address) == (channel, stored))


def remove_contact(channel: str, address: str) -> None:
    stored = checked_address(channel, address)
    with transaction() as session:
        if not store.remove(session, channel, stored):
            raise ContactError(address=stored, detail=f"is kept for nobody on {channel}")


def list_contacts(actor_id: str | None = None) -> list[ContactView]:
    actor = normal_actor_id(actor_id) if actor_id is not None else None
    with transaction(readonly=True) as session:
        return [
            ContactView(c.actor_id, c.channel, c.address, c.created_at)
            for c in store.list_all(session, actor)
        ]


def reachable_responders(interrupt: InterruptView, channel: str) -> dict[str, list[str]]:
    """Who may answer ``interrupt`` and is reached on ``channel``: actor id → addresses.

    Active actors holding one of its roles, but the run's starter where the interrupt keeps
    them out; and not those who already hold an active link to it on this channel (a
    notifier's retry does not write to them twice).
    """
    with transaction(readonly=True) as session:
        found = store.reachable(session, channel, interrupt.roles)
        starter = None
        if interrupt.separate_from_starter:
            run = run_store.find_run(session, interrupt.run_id)
            starter = normal_actor_id(run.started_by) if run and run.started_by else None
        linked = {
            link.actor_id
            for link in link_store.list_links(
                session, interrupt_id=interrupt.id, channel=channel, active_at=utcnow()
            )
        }
    responders: dict[str, list[str]] = {}
    for actor, address in found:
        if actor.id == starter or actor.id in linked:
            continue
        responders.setdefault(actor.id, []).append(address)
    return responders
