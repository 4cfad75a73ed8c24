"""``resume.v1`` contracts bound to an interrupt as the responder was shown it."""

from __future__ import annotations

import secrets
from datetime import timedelta
from typing import Any

from models.contracts import RESUME_SCHEMA_VERSION, InterruptView
from models.db import utcnow

# How long a filled-in form or template stays submittable.
CONTRACT_LIFETIME = timedelta(minutes=30)


def new_key(actor_id: str) -> str:
    return f"{actor_id[:100]}-{secrets.token_hex(12)}"


def defaults_of(schema: dict[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    return {name: node["default"] for name, node in properties.items() if "default" in node}


def contract_for(
    interrupt: InterruptView,
    actor_id: str,
    *,
    decision: str = "approved",
    input: dict[str, Any] | None = None,
    idempotency_key: str | None = None,
    actor_type: str = "human",
) -> dict[str, Any]:
    """A contract for ``interrupt`` with its binding (checkpoint, scope, evidence hash)."""
    return {
        "schema_version": RESUME_SCHEMA_VERSION,
        "run_id": interrupt.run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": actor_type, "id": actor_id},
        "decision": decision,
        "input": input if input is not None else defaults_of(interrupt.json_schema),
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "idempotency_key": idempotency_key or new_key(actor_id),
        "expires_at": (utcnow() + CONTRACT_LIFETIME).isoformat(),
    }
