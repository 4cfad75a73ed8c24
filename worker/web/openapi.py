"""The OpenAPI document of ``interlude serve``, complete enough for a generated client.

FastAPI documents what its routes declare. The resume route reads its body itself (whatever
arrives is recorded, malformed or not), so its contract is added here: as a component whose
references resolve (``ResumeContract``, ``ActorRef``, ``Decision``), with what the gateway
refuses as malformed said in the schema too (text with a NUL, which no database stores).
Links say how one answer leads to the next request (a listing to an interrupt, its template to
a resume, a resume to its run), for clients and for the stateful fuzzing of the tests.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI
from fastapi.openapi.utils import get_openapi

from models.contracts import ResumeContract
from worker.web.api import RESUME_EXAMPLES

COMPONENTS = "#/components/schemas/"
# Text without a NUL (JSON Schema's patterns are ECMA-262's).
NO_NUL = "^[^\\u0000]*$"
# Any JSON value the gateway stores: text and keys without a NUL, at any depth.
STORABLE_JSON: dict[str, Any] = {
    "description": "any JSON value whose text and keys hold no NUL character",
    "anyOf": [
        {"type": "string", "pattern": NO_NUL},
        {"type": "number"},
        {"type": "boolean"},
        {"type": "null"},
        {"type": "array", "items": {"$ref": f"{COMPONENTS}StorableJson"}},
        {
            "type": "object",
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": f"{COMPONENTS}StorableJson"},
        },
    ],
}
# How answers lead to requests: (operation, status, link name, target, parameters, body).
LINKS: list[tuple[str, str, str, str, dict[str, str], str | None]] = [
    ("list_interrupts", "200", "Interrupt", "get_interrupt",
     {"interrupt_id": "$response.body#/items/0/id"}, None),
    ("get_interrupt", "200", "Resume", "submit_resume", {}, "$response.body#/template"),
    ("get_interrupt", "200", "Run", "get_run", {"run_id": "$response.body#/interrupt/run_id"},
     None),
    ("submit_resume", "202", "Run", "get_run", {"run_id": "$response.body#/run_id"}, None),
]  # fmt: skip


def document(app: FastAPI) -> dict[str, Any]:
    """The document served at /openapi.json (built once)."""
    if app.openapi_schema:
        return app.openapi_schema
    doc = get_openapi(
        title=app.title,
        version=app.version,
        summary=app.summary,
        routes=app.routes,
    )
    schemas = doc.setdefault("components", {}).setdefault("schemas", {})
    contract = ResumeContract.model_json_schema(ref_template=COMPONENTS + "{model}")
    for name, schema in contract.pop("$defs", {}).items():
        schemas[name] = _storable(schema)
    schemas["ResumeContract"] = _storable(contract)
    schemas["StorableJson"] = STORABLE_JSON
    operations = {
        operation["operationId"]: operation
        for path in doc["paths"].values()
        for operation in path.values()
        if "operationId" in operation
    }
    operations["submit_resume"]["requestBody"] = _body_of("ResumeContract")
    # An answer, and a tool-call review's approve, edit and reject (worker.web.api).
    operations["submit_resume"]["requestBody"]["content"]["application/json"]["examples"] = (
        RESUME_EXAMPLES
    )
    # Other bodies a route reads itself (declared inline): components too, storable alike.
    for operation in operations.values():
        inline = operation.get("requestBody", {}).get("content", {}).get("application/json")
        schema = inline.get("schema", {}) if inline else {}
        if "title" in schema and "$ref" not in schema:
            schema = _refer_to_components(schema)
            for name, nested in schema.pop("$defs", {}).items():
                schemas[name] = _storable(nested)
            schemas[schema["title"]] = _storable(schema)
            operation["requestBody"] = _body_of(schema["title"])
    for source, status, name, target, parameters, body in LINKS:
        link: dict[str, Any] = {"operationId": target}
        if parameters:
            link["parameters"] = parameters
        if body is not None:
            link["requestBody"] = body
        response = operations[source]["responses"][status]
        response.setdefault("links", {})[name] = link
    app.openapi_schema = doc
    return doc


def _refer_to_components(value: Any) -> Any:
    """``value`` (a model's schema) with its references to its own ``$defs`` made references
    to the document's components, where those definitions go."""
    if isinstance(value, dict):
        return {
            k: v.replace("#/$defs/", COMPONENTS)
            if k == "$ref" and isinstance(v, str)
            else _refer_to_components(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_refer_to_components(item) for item in value]
    return value


def _body_of(component: str) -> dict[str, Any]:
    return {
        "required": True,
        "content": {"application/json": {"schema": {"$ref": f"{COMPONENTS}{component}"}}},
    }


def _storable(schema: dict[str, Any]) -> dict[str, Any]:
    """``schema`` (a contract's) saying what the gateway stores: no NUL in any text."""
    if schema.get("type") == "string" and not {"enum", "const", "format", "pattern"} & set(schema):
        return {**schema, "pattern": NO_NUL}
    if schema.get("type") == "object" and schema.get("additionalProperties") is True:
        # (``input``: an object of any JSON values)
        return {
            **schema,
            "propertyNames": {"pattern": NO_NUL},
            "additionalProperties": {"$ref": f"{COMPONENTS}StorableJson"},
        }
    if not {"type", "$ref", "anyOf", "oneOf", "allOf", "enum", "const"} & set(schema):
        # (``scope``: any JSON value at all)
        return {**schema, "$ref": f"{COMPONENTS}StorableJson"}
    shaped = dict(schema)
    if "properties" in schema:
        shaped["properties"] = {k: _storable(v) for k, v in schema["properties"].items()}
    for key in ("anyOf", "oneOf", "allOf"):
        if key in schema:
            shaped[key] = [_storable(v) for v in schema[key]]
    return shaped
