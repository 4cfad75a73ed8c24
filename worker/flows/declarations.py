"""Interrupt declarations: the arguments of ``ctx.interrupt``, checked once into one value.

The checked value (``InterruptDecl``) is what the runtime stores and what ``InterruptView``
reads back; a flaw in a declaration is the flow's bug (FlowDefinitionError).
"""

from __future__ import annotations

import numbers
from datetime import timedelta
from typing import Any, NotRequired, TypedDict, Unpack

from pydantic import BaseModel, ValidationError

from models.canonical import NotCanonicalError, evidence_hash
from models.contracts import InterruptDecl, json_copy
from models.enums import ExpiryPolicy, InterruptKind
from models.errors import FlowDefinitionError
from models.settings import LONGEST_SECONDS
from models.storable import storable_text, unstorable_where
from worker.flows.policies import checked_roles
from worker.flows.schemas import json_schema_of, schema_id_of

# Interrupt names are stable across re-executions; they key the answer at a checkpoint.
MAX_INTERRUPT_NAME = 200
# The interrupt an operator's pause stops a run on.
PAUSE_INTERRUPT = "operator.pause"


class InterruptArgs(TypedDict):
    """What a step may say about an interrupt (see the README's walkthrough)."""

    kind: InterruptKind | str
    input: type[BaseModel]
    authority: list[str]
    expires_in: float | timedelta
    scope: NotRequired[Any]
    evidence: NotRequired[Any]
    on_expiry: NotRequired[ExpiryPolicy | str]
    reason: NotRequired[str]
    escalate_to: NotRequired[list[str] | None]
    escalation_expires_in: NotRequired[float | timedelta | None]
    max_escalations: NotRequired[int]
    default: NotRequired[BaseModel | dict[str, Any] | None]
    separate_from_starter: NotRequired[bool]


class Suspend(BaseException):
    """Control flow, not an error: the step stops here and the run waits for ``decl`` (and
    ``more``: the other asks of a group asked together).

    It derives from BaseException so that a step's ``except Exception`` cannot swallow it.
    """

    def __init__(self, decl: InterruptDecl, more: tuple[InterruptDecl, ...] = ()) -> None:
        super().__init__(decl.name)
        self.decl = decl
        self.decls = (decl, *more)


# InterruptArgs's keys: those without NotRequired are required (TypedDict cannot tell them
# apart at run time here, under postponed annotations).
KNOWN = frozenset(InterruptArgs.__annotations__)
REQUIRED = frozenset({"kind", "input", "authority", "expires_in"})


def _seconds(value: float | timedelta, what: str) -> float:
    if isinstance(value, timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, numbers.Real) and not isinstance(value, bool):
        seconds = float(value)
    else:  # "60" or True would be read as 60 or 1 second
        raise FlowDefinitionError(
            detail=f"{what} must be seconds (a number or a timedelta), got {value!r}"
        )
    if not 0 < seconds < float("inf"):
        raise FlowDefinitionError(detail=f"{what} must be positive, got {value!r}")
    if seconds > LONGEST_SECONDS:
        # A deadline past what a datetime holds would fail the step's commit, outside the step.
        raise FlowDefinitionError(
            detail=f"{what} must be at most {LONGEST_SECONDS} seconds (100 years), got {value!r}"
        )
    return seconds


def declare(name: str, **args: Unpack[InterruptArgs]) -> InterruptDecl:
    """Check an interrupt declaration and turn it into the value that is stored."""
    if (
        not isinstance(name, str)
        or not 0 < len(name) <= MAX_INTERRUPT_NAME
        or not name.isprintable()
    ):
        raise FlowDefinitionError(
            detail=f"interrupt name {name!r} must be 1 to {MAX_INTERRUPT_NAME} printable characters"
        )
    missing, unknown = sorted(REQUIRED - args.keys()), sorted(args.keys() - KNOWN)
    if missing or unknown:
        # A KeyError at the first attempt would be retried as if transient; a misspelt option
        # (``expire_in=``) would be ignored.
        problems = [f"{key}= is missing" for key in missing]
        problems += [f"{key}= is not an interrupt argument" for key in unknown]
        raise FlowDefinitionError(detail=f"interrupt {name!r}: {', '.join(problems)}")
    try:
        kind = InterruptKind(args["kind"])
        policy = ExpiryPolicy(args.get("on_expiry", ExpiryPolicy.EXPIRE))
    except ValueError as exc:
        raise FlowDefinitionError(detail=f"interrupt {name!r}: {exc}") from None
    # A bare string is iterable too: "approver" must not become the roles a, e, o, p, r, v.
    authority = checked_roles(args["authority"])
    if authority is None:
        raise FlowDefinitionError(detail=f"interrupt {name!r}: authority needs a list of roles")
    scope, evidence = args.get("scope"), args.get("evidence")
    for what, value in (("scope", scope), ("evidence", evidence)):
        try:
            stored = json_copy(value)
        except (TypeError, ValueError) as exc:
            raise FlowDefinitionError(
                detail=f"interrupt {name!r}: {what} is not JSON: {exc}"
            ) from None
        where = unstorable_where(stored)
        if where is not None:
            # PostgreSQL refuses both in JSON (SQLite would keep them): refused alike on either,
            # as the flow's bug, rather than a commit that fails at every attempt.
            raise FlowDefinitionError(
                detail=f"interrupt {name!r}: {what} holds NUL or unpaired surrogate "
                f"characters{where}"
            )
    reason = args.get("reason", "")
    if not isinstance(reason, str) or not storable_text(reason):
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: reason must be text without NUL or unpaired "
            f"surrogate characters"
        )
    try:
        hashed = evidence_hash(evidence)
    except NotCanonicalError as exc:
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: evidence is not I-JSON (RFC 8785): {exc}"
        ) from None
    model = args["input"]
    schema_name, schema_version = schema_id_of(model)
    expires_in = _seconds(args["expires_in"], f"interrupt {name!r}: expires_in")
    return InterruptDecl(
        name=name,
        kind=kind.value,
        reason=reason,
        schema_name=schema_name,
        schema_version=schema_version,
        json_schema=json_schema_of(model),
        roles=authority,
        scope=scope,
        evidence=evidence,
        evidence_hash=hashed,
        separate_from_starter=args.get("separate_from_starter", False),
        expires_in=expires_in,
        on_expiry=policy.value,
        escalation=_escalation(name, policy, args, expires_in),
        default_input=_default_input(name, policy, model, args.get("default")),
    )


def _escalation(
    name: str, policy: ExpiryPolicy, args: InterruptArgs, expires_in: float
) -> dict[str, Any] | None:
    if policy is not ExpiryPolicy.ESCALATE:
        return None
    escalate_to = args.get("escalate_to")
    if not escalate_to:
        raise FlowDefinitionError(detail=f"interrupt {name!r}: escalate needs escalate_to")
    # As for authority: "lead" must not become the roles l, e, a and d.
    roles = checked_roles(escalate_to)
    if roles is None:
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: escalate_to needs a list of roles, got {escalate_to!r}"
        )
    then = args.get("escalation_expires_in")
    most = args.get("max_escalations", 1)
    # The expiry sweep compares it with a count: "two" would fail every sweep, and the wait
    # would never end.
    if type(most) is not int or most < 0:
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: max_escalations must be a whole number >= 0, got {most!r}"
        )
    return {
        "roles": roles,
        "expires_in": (
            _seconds(then, f"interrupt {name!r}: escalation_expires_in")
            if then is not None
            else expires_in
        ),
        "max": most,
    }


def _default_input(
    name: str, policy: ExpiryPolicy, model: type[BaseModel], default: Any
) -> dict[str, Any] | None:
    if policy is not ExpiryPolicy.DEFAULT:
        return None
    if default is None:
        raise FlowDefinitionError(detail=f"interrupt {name!r}: default policy needs default=")
    data = default.model_dump(mode="json") if isinstance(default, BaseModel) else default
    try:
        checked: dict[str, Any] = json_copy(model.model_validate(data).model_dump(mode="json"))
    except ValidationError as exc:
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: default input is invalid: {exc.errors()[0]['msg']}"
        ) from None
    except ValueError as exc:  # a number that is not finite ("inf" for a float field)
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: default input is not JSON: {exc}"
        ) from None
    where = unstorable_where(checked)
    if where is not None:
        raise FlowDefinitionError(
            detail=f"interrupt {name!r}: default input holds NUL or unpaired surrogate "
            f"characters{where}"
        )
    return checked
