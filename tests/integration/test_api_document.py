"""The OpenAPI document says what the server does (issue 42, finding 11): its references
resolve, the resume contract refuses what the gateway refuses as malformed (text with a NUL),
every refusal a read may answer is listed with its body, and /metrics is text. The fuzzing of
test_api_fuzz.py checks every answer against it; these name each repair on its own."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import jsonschema_rs
import pytest

from tests.webclient import web_client

CONTRACT = {
    "schema_version": "resume.v1",
    "run_id": "r",
    "checkpoint_id": "c",
    "interrupt_id": "i",
    "actor": {"type": "human", "id": "alice"},
    "decision": "approved",
    "input": {"comment": "ok", "nested": [{"a": 1}]},
    "scope": {"env": ["prod"]},
    "evidence_hash": "sha256:00",
    "idempotency_key": "k-1",
    "expires_at": "2030-01-01T00:00:00Z",
}


@pytest.fixture()
def document(db: str) -> Iterator[dict[str, Any]]:
    with web_client() as client:
        yield client.get("/openapi.json").json()


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "$ref" and isinstance(item, str):
                yield item
            else:
                yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def _resolves(document: dict[str, Any], ref: str) -> bool:
    if not ref.startswith("#/"):
        return False
    node: Any = document
    for part in ref[2:].split("/"):
        if not isinstance(node, dict) or part not in node:
            return False
        node = node[part]
    return True


def test_every_reference_of_the_document_resolves(document: dict[str, Any]) -> None:
    # (The resume body referred to #/$defs/ActorRef and #/$defs/Decision, which are not there)
    unresolved = sorted({ref for ref in _refs(document) if not _resolves(document, ref)})
    assert unresolved == []


def test_the_documented_contract_refuses_what_the_gateway_refuses_as_malformed(
    document: dict[str, Any],
) -> None:
    body = document["paths"]["/v1/resume"]["post"]["requestBody"]["content"]["application/json"]
    schema = {**body["schema"], "components": document["components"]}
    contract = jsonschema_rs.validator_for(schema)
    assert contract.is_valid(CONTRACT)
    for with_a_nul in (
        {**CONTRACT, "run_id": "r\x00"},
        {**CONTRACT, "actor": {"type": "human", "id": "al\x00ice"}},
        {**CONTRACT, "input": {"comment\x00": "ok"}},
        {**CONTRACT, "input": {"nested": [{"a": "b\x00"}]}},
        {**CONTRACT, "scope": {"env": ["pr\x00d"]}},
    ):
        assert not contract.is_valid(with_a_nul), with_a_nul


@pytest.mark.parametrize(
    ("path", "statuses"),
    [
        ("/v1/interrupts", {"200", "401", "422", "429"}),
        ("/v1/interrupts/{interrupt_id}", {"200", "401", "404", "429"}),
        ("/v1/runs/{run_id}", {"200", "401", "404", "429"}),
    ],
)
def test_each_read_lists_its_refusals_with_their_bodies(
    document: dict[str, Any], path: str, statuses: set[str]
) -> None:
    responses = document["paths"][path]["get"]["responses"]
    assert statuses <= set(responses)
    for status in statuses - {"200"}:
        assert "application/json" in responses[status]["content"], status
    # A 422 is FastAPI's validation error, whatever parameter it names
    if "422" in responses:
        schema = responses["422"]["content"]["application/json"]["schema"]
        assert schema == {"$ref": "#/components/schemas/HTTPValidationError"}


def test_metrics_are_documented_as_text(document: dict[str, Any]) -> None:
    content = document["paths"]["/metrics"]["get"]["responses"]["200"]["content"]
    assert set(content) == {"text/plain"}
