"""``ResumeContract.for_interrupt``: a contract bound to what the interrupt shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from models.contracts import InterruptView, contract_payload
from worker import ResumeContract


def _view(**fields: Any) -> InterruptView:
    # Only what a contract binds to; the view's other fields play no part here.
    values: dict[str, Any] = {
        "id": "i-1",
        "run_id": "r-1",
        "checkpoint_id": "c-1",
        "scope": {"env": "prod"},
        "evidence_hash": "sha256:ab",
        "previous_input": None,
        "default_input": None,
    }
    return InterruptView.model_construct(**{**values, **fields})


def test_the_contract_is_bound_to_the_run_checkpoint_scope_and_evidence() -> None:
    before = datetime.now(UTC)
    contract = ResumeContract.for_interrupt(
        _view(), actor="ada", decision="rejected", input={"note": "no"}, idempotency_key="k-1"
    )
    assert contract.schema_version == "resume.v1"
    assert (contract.run_id, contract.checkpoint_id, contract.interrupt_id) == ("r-1", "c-1", "i-1")
    assert (contract.scope, contract.evidence_hash) == ({"env": "prod"}, "sha256:ab")
    assert (contract.actor.type, contract.actor.id) == ("human", "ada")
    assert (contract.decision.value, contract.input, contract.idempotency_key) == (
        "rejected",
        {"note": "no"},
        "k-1",
    )
    # Fifteen minutes by default
    assert before + timedelta(minutes=15) <= contract.expires_at
    assert contract.expires_at <= datetime.now(UTC) + timedelta(minutes=15)


def test_defaults_input_from_a_renewed_review_then_the_default_input() -> None:
    renewed = _view(previous_input={"ticket": "T-1"}, default_input={"ticket": "none"})
    assert ResumeContract.for_interrupt(renewed, actor="ada").input == {"ticket": "T-1"}
    defaulted = _view(default_input={"ticket": "none"})
    assert ResumeContract.for_interrupt(defaulted, actor="ada").input == {"ticket": "none"}
    assert ResumeContract.for_interrupt(_view(), actor="ada").input == {}
    assert ResumeContract.for_interrupt(renewed, actor="ada", input={}).input == {}


def test_keys_are_fresh_and_expiry_takes_seconds_or_a_timedelta() -> None:
    first = ResumeContract.for_interrupt(_view(), actor="ada")
    second = ResumeContract.for_interrupt(_view(), actor="ada")
    assert first.idempotency_key != second.idempotency_key
    seconds = ResumeContract.for_interrupt(_view(), actor="ada", expires_in=60)
    delta = ResumeContract.for_interrupt(_view(), actor="ada", expires_in=timedelta(seconds=60))
    assert abs(seconds.expires_at - delta.expires_at) < timedelta(seconds=5)
    assert seconds.expires_at < first.expires_at


def test_a_malformed_contract_is_not_built_but_its_json_can_be_submitted() -> None:
    with pytest.raises(ValidationError, match="decision"):
        ResumeContract.for_interrupt(_view(), actor="ada", decision="maybe")
    # The gateway refuses (and records) such a payload; the CLI hands it over as it is.
    payload = contract_payload(_view(), actor="ada", decision="maybe")
    assert payload["decision"] == "maybe"
    assert payload["interrupt_id"] == "i-1"
