"""HTML form fields from an interrupt's JSON Schema, and the submitted form back to input.

The form only converts text to the schema's types; validation stays with the gateway, which
checks the input against the schema recorded on the interrupt and names what is wrong.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from worker.present.jsontext import finite_number, loads_finite

PREFIX = "input."
# A tool-call review's edit form: one field per argument of the call.
ARGS_PREFIX = "args."


@dataclass(frozen=True)
class FormField:
    name: str
    label: str
    # text | number | integer | boolean | select | json
    widget: str
    required: bool
    description: str = ""
    options: list[Any] = field(default_factory=list)
    value: Any = None
    minimum: float | None = None
    maximum: float | None = None
    min_length: int | None = None
    max_length: int | None = None
    prefix: str = PREFIX

    @property
    def input_name(self) -> str:
        return self.prefix + self.name

    @property
    def shown(self) -> str:
        """The value as the form shows it."""
        if self.value is None:
            return ""
        if self.widget == "json":
            return json.dumps(self.value)
        return str(self.value)

    def selected(self, option: Any) -> bool:
        return self.value is not None and str(option) == str(self.value)


def _resolve(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str) and ref.startswith("#/$defs/"):
        found = schema.get("$defs", {}).get(ref.removeprefix("#/$defs/"))
        if isinstance(found, Mapping):
            return {**found, **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _plain(schema: Mapping[str, Any], node: Mapping[str, Any]) -> Mapping[str, Any]:
    """The one non-null alternative of ``X | None``; the node itself otherwise."""
    node = _resolve(schema, node)
    options = node.get("anyOf")
    if isinstance(options, list):
        rest = [_resolve(schema, o) for o in options if o.get("type") != "null"]
        if len(rest) == 1:
            merged = {**rest[0], **{k: v for k, v in node.items() if k != "anyOf"}}
            return merged
    return node


def _widget(node: Mapping[str, Any]) -> str:
    if isinstance(node.get("enum"), list):
        return "select"
    kind = node.get("type")
    if kind in {"string", "number", "integer", "boolean"}:
        return "text" if kind == "string" else str(kind)
    return "json"


def fields_of(
    schema: Mapping[str, Any],
    values: Mapping[str, Any] | None = None,
    order: list[str] | None = None,
    prefix: str = PREFIX,
) -> list[FormField]:
    """One field per top-level property, prefilled from ``values``.

    In ``order`` when given (the model's declaration order); else required fields first, as
    the schema lists them: a stored schema (JSONB) need not keep its properties' order.
    """
    required = list(schema.get("required", []))
    properties: Mapping[str, Any] = schema.get("properties") or {}
    names = [n for n in order or [] if n in properties]
    names += [n for n in required if n in properties and n not in names]
    names += [n for n in properties if n not in names]
    fields = []
    for name in names:
        raw = properties[name]
        node = _plain(schema, raw)
        value = (values or {}).get(name, node.get("default"))
        fields.append(
            FormField(
                name=name,
                label=str(node.get("title") or name),
                widget=_widget(node),
                required=name in set(required),
                description=str(node.get("description") or ""),
                options=list(node.get("enum") or []),
                value=value,
                minimum=node.get("minimum"),
                maximum=node.get("maximum"),
                min_length=node.get("minLength"),
                max_length=node.get("maxLength"),
                prefix=prefix,
            )
        )
    return fields


def args_schema_of(review_schema: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON Schema of a tool-call review's arguments (``args`` of its input schema).

    Taken from the schema the interrupt recorded, with the definitions it refers to, so that
    the edit form needs no flow code here; ``{}`` when the schema has no such property.
    """
    node = (review_schema.get("properties") or {}).get("args")
    if not isinstance(node, Mapping):
        return {}
    return {**_plain(review_schema, node), "$defs": review_schema.get("$defs", {})}


def input_from_form(fields: list[FormField], form: Mapping[str, str]) -> dict[str, Any]:
    """The input a submitted form stands for; a blank field is left out (its default applies)."""
    result: dict[str, Any] = {}
    for f in fields:
        if f.widget == "boolean":
            result[f.name] = f.input_name in form
            continue
        text = form.get(f.input_name, "")
        if text == "":
            continue
        result[f.name] = _convert(f, text)
    return result


def _convert(f: FormField, text: str) -> Any:
    # A value that does not convert is passed on as typed: the gateway says what is wrong, and
    # records it under the run. (A non-finite number would make the whole contract "not JSON",
    # recorded under no run and naming no field.)
    try:
        if f.widget == "integer":
            return int(text)
        if f.widget == "number":
            return finite_number(text)
        if f.widget == "json":
            return loads_finite(text)
    except (ValueError, RecursionError):  # RecursionError: JSON nested past the parser's stack
        return text
    if f.widget == "select":
        return next((o for o in f.options if str(o) == text), text)
    return text
