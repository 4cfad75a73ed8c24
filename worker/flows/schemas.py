"""Interrupt input models registered under a schema name and version (``approval.v1``)."""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Callable
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from models.contracts import json_copy
from models.errors import FlowDefinitionError
from worker.flows.origins import defining_file

M = TypeVar("M", bound=type[BaseModel])
# Versions start at 1 and are written without leading zeros: "x.v01" would be "x.v1" again.
SCHEMA_ID = re.compile(r"^([A-Za-z][A-Za-z0-9_\-]*)\.v([1-9][0-9]*)$")

# The interrupts' schema_name column (String(200)) and schema_version column (a 32-bit integer).
LONGEST_SCHEMA_NAME = 200
LARGEST_SCHEMA_VERSION = 2**31 - 1

_lock = threading.Lock()
_schemas: dict[tuple[str, int], type[BaseModel]] = {}
_ids: dict[type[BaseModel], tuple[str, int]] = {}
# Where each registered model was defined: (file, qualified name of the class).
_origins: dict[type[BaseModel], tuple[str, str]] = {}


def parse_schema_id(schema_id: str) -> tuple[str, int]:
    """``(name, version)`` of a schema id being defined (``approval.v1``); FlowDefinitionError
    for anything else. Stored rows hold the two apart: nothing read back is parsed here."""
    match = SCHEMA_ID.fullmatch(schema_id) if isinstance(schema_id, str) else None
    if match is None:
        raise FlowDefinitionError(
            detail=f"schema id {schema_id!r} is not like 'approval.v1' (a name, then .v and a "
            "version from 1, without leading zeros)"
        )
    name, version = match.group(1), int(match.group(2))
    # What the interrupts' columns hold: beyond, every step asking it would fail at its commit.
    if len(name) > LONGEST_SCHEMA_NAME or version > LARGEST_SCHEMA_VERSION:
        shown = schema_id if len(schema_id) <= 60 else schema_id[:57] + "..."
        raise FlowDefinitionError(
            detail=f"schema id {shown!r}: a name of at most {LONGEST_SCHEMA_NAME} characters "
            f"and a version of at most {LARGEST_SCHEMA_VERSION}"
        )
    return name, version


def input_schema(schema_id: str) -> Callable[[M], M]:
    """Register a pydantic model as the input of interrupts under ``schema_id``.

    FlowDefinitionError if ``model`` is not a pydantic model, has no JSON Schema, or another
    model (of another file, or another class of the same file) has the id already.
    """
    name, version = parse_schema_id(schema_id)

    def decorate(model: M) -> M:
        if not (isinstance(model, type) and issubclass(model, BaseModel)):
            raise FlowDefinitionError(
                detail=f"@input_schema({schema_id!r}) needs a pydantic model class, got {model!r}"
            )
        try:
            # Now, not at the first interrupt: a step would fail on it at every attempt.
            json_copy(json_schema_of(model))
        except Exception as exc:
            raise FlowDefinitionError(
                detail=f"@input_schema({schema_id!r}): {model.__qualname__} has no JSON Schema: "
                f"{type(exc).__name__}: {exc}"
            ) from None
        origin = (defining_file(), model.__qualname__)
        with _lock:
            known = _schemas.get((name, version))
            if known is not None and _origins.get(known) != origin:
                # Last one wins would validate pending interrupts' answers against another
                # model than the one they were asked with.
                first = _origins.get(known, ("?", known.__qualname__))
                raise FlowDefinitionError(
                    detail=f"schema {schema_id!r} is registered on {first[1]} ({first[0]}) and "
                    f"again on {origin[1]} ({origin[0]}): give one another name or version"
                )
            _schemas[(name, version)] = model
            _ids[model] = (name, version)
            _origins[model] = origin
        return model

    return decorate


def schema_id_of(model: type[BaseModel]) -> tuple[str, int]:
    try:
        return _ids[model]
    except (KeyError, TypeError):  # TypeError: not even hashable, so not a model class
        name = getattr(model, "__name__", repr(model))
        raise FlowDefinitionError(
            detail=f"{name} is not registered with @input_schema('name.vN')"
        ) from None


@functools.cache
def json_schema_of(model: type[BaseModel]) -> dict[str, Any]:
    """The JSON Schema recorded with an interrupt and compared again at resume time."""
    return model.model_json_schema()


def lookup(name: str, version: int) -> type[BaseModel] | None:
    with _lock:
        return _schemas.get((name, version))


def describe_errors(exc: ValidationError) -> str:
    """Every problem of an input, not only the first: a responder fixes them all at once."""
    return "; ".join(
        f"{'.'.join(str(p) for p in error['loc']) or 'input'}: {error['msg']}"
        for error in exc.errors()
    )


def input_problems(name: str, version: int, value: Any) -> str | None:
    """What is wrong with ``value`` as input of schema ``name.vN`` (None: nothing, or the schema
    is not registered in this process and only the gateway can tell)."""
    model = lookup(name, version)
    if model is None:
        return None
    try:
        model.model_validate(value)
    except ValidationError as exc:
        return describe_errors(exc)
    return None


class _Input(BaseModel):
    # Strict: a contract says what it means. A grant of units "5" or true is refused by name,
    # not read as 5 or 1.0.
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)


@input_schema("budget.v1")
class BudgetGrant(_Input):
    """More allowance for a run whose budget ran out."""

    units: float = Field(gt=0)
    note: str = ""


@input_schema("operator.v1")
class OperatorRelease(_Input):
    """Release a run an operator paused."""

    note: str = ""


@input_schema("repair.v1")
class RepairResolution(_Input):
    """An operator's finding on an effect whose outcome was unknown."""

    outcome: Literal["applied", "not_applied"]
    receipt: Any = None
    note: str = ""
