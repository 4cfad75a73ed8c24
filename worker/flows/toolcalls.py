"""Tool-call review: a responder approves, edits or rejects a call an agent proposes.

A flow declares a tool (``flow.tool``): the model of its arguments and who may approve a
call of it. A step asks for a review with ``ctx.review_call``; the answer (``CallAnswer``,
one model per arguments model) is the approved arguments (absent: as proposed) or, with a
rejection, a message for the agent. An edit is authorized again for the edited call at the
gateway, and the effect that executes the call must carry exactly the arguments that were
approved (``ctx.effect(..., reviewed=call)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model

from models.canonical import canonical_json
from models.contracts import json_copy
from models.errors import FlowDefinitionError
from worker.flows.policies import checked_roles
from worker.flows.schemas import input_schema, lookup, schema_id_of

# The text of a rejection that the agent is told (kept short: it goes into a model's context).
LONGEST_MESSAGE = 4000
Authority = list[str] | Callable[[Any], list[str]]

_answers: dict[type[BaseModel], type[BaseModel]] = {}


@dataclass(frozen=True)
class Tool:
    """A tool of a flow whose calls are reviewed before they run."""

    name: str
    args: type[BaseModel]
    answer: type[BaseModel]
    authority: Authority

    def roles_for(self, args: BaseModel) -> list[str]:
        """The roles that may approve a call with ``args`` (the flow's policy decides)."""
        roles = self.authority(args) if callable(self.authority) else self.authority
        checked = checked_roles(roles)
        if checked is None:
            raise FlowDefinitionError(
                detail=f"tool {self.name!r}: its authority gave {roles!r}, not a list of roles"
            )
        return checked


def declare_tool(where: str, name: str, args: type[BaseModel], authority: Authority) -> Tool:
    if not isinstance(name, str) or not name or not name.isprintable():
        raise FlowDefinitionError(detail=f"{where}: tool name {name!r} is not a name")
    if not (isinstance(args, type) and issubclass(args, BaseModel)):
        raise FlowDefinitionError(
            detail=f"{where}: tool {name!r} needs args= a pydantic model, got {args!r}"
        )
    if not callable(authority) and not isinstance(authority, list):
        raise FlowDefinitionError(
            detail=f"{where}: tool {name!r} needs authority= a list of roles or a function "
            f"of the call's arguments, got {authority!r}"
        )
    return Tool(name, args, answer_model(args), authority)


def answer_model(args: type[BaseModel]) -> type[BaseModel]:
    """The input a review of a call with ``args`` takes, registered as ``<args>-review.vN``.

    One per arguments model, registered when the flow module is imported, so that a gateway
    in another process validates answers against it as it does any interrupt's input.
    """
    known = _answers.get(args)
    if known is not None:
        return known
    args_name, args_version = schema_id_of(args)
    approved: Any = args | None  # (a type made at run time: the checker sees a value)
    model = create_model(
        f"{args.__name__}Review",
        __config__=ConfigDict(extra="forbid", frozen=True),
        args=(
            approved,
            Field(
                default=None,
                description="the call's arguments as approved; leave out to approve them as "
                "proposed, change them to approve an edited call",
            ),
        ),
        message=(
            str,
            Field(
                default="",
                max_length=LONGEST_MESSAGE,
                description="with a rejection: why, for the agent to hear",
            ),
        ),
    )
    registered = input_schema(f"{args_name}-review.v{args_version}")(model)
    _answers[args] = registered
    return registered


def is_review(schema_name: str, schema_version: int) -> bool:
    """Whether interrupts of this input schema review a tool call."""
    model = lookup(schema_name, schema_version)
    return model is not None and model in _answers.values()


def arguments_hash(arguments: Any) -> str:
    """The canonical JSON of a call's arguments (RFC 8785): what approval binds to."""
    return canonical_json(json_copy(arguments))


@dataclass(frozen=True)
class ReviewedCall:
    """A reviewed tool call, as ``ctx.review_call`` returns it.

    ``approved``: run it with ``arguments`` (the proposal, or the responder's edit);
    otherwise ``message`` says why not, and nothing may run.
    """

    tool: str
    interrupt_id: str
    approved: bool
    args: BaseModel
    proposed: BaseModel
    edited: bool
    message: str
    actor: str

    @property
    def arguments(self) -> dict[str, Any]:
        """The approved arguments as JSON, for ``ctx.effect(..., reviewed=call, **arguments)``."""
        dumped: dict[str, Any] = self.args.model_dump(mode="json")
        return dumped

    @property
    def rejected(self) -> bool:
        return not self.approved


def evidence_of(tool: str, proposed: dict[str, Any], context: Any) -> dict[str, Any]:
    """What a reviewer is shown, and what the approval binds to: the tool and its call."""
    shown: dict[str, Any] = {"tool": tool, "args": proposed}
    if context is not None:
        shown["context"] = context
    return shown
