"""The events a flow takes: a name, the payload's model, and who may send it."""

from __future__ import annotations

from dataclasses import dataclass

from pydantic import BaseModel

from models.errors import FlowDefinitionError
from worker.flows.policies import checked_roles
from worker.flows.schemas import schema_id_of

# Events kept per run, not yet asked for: beyond, a send is refused (a sender in a loop
# must not fill the database through one run).
MAILBOX_LIMIT = 100


@dataclass(frozen=True)
class EventDef:
    """An event a flow's steps wait for (``ctx.wait_for_event``), sent by ``send_event``."""

    name: str
    input: type[BaseModel]
    roles: tuple[str, ...]


def define_event(where: str, name: object, model: object, authority: object) -> EventDef:
    """An EventDef, or FlowDefinitionError saying what is wrong with the declaration."""
    if not isinstance(name, str) or not 0 < len(name) <= 200 or not name.isprintable():
        raise FlowDefinitionError(detail=f"{where}: event name {name!r} is not a name")
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise FlowDefinitionError(
            detail=f"{where}: event {name!r} needs input= a pydantic model, got {model!r}"
        )
    schema_id_of(model)  # registered with @input_schema: a gateway elsewhere validates it
    roles = checked_roles(authority)
    if roles is None:
        raise FlowDefinitionError(
            detail=f"{where}: event {name!r} needs authority= a list of roles, got {authority!r}"
        )
    return EventDef(name, model, tuple(roles))
