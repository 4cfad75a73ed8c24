"""Issue 11 without services: RFC 8785 hashes, actor id normal form, held credentials, exit
statuses of repeated resumes, non-finite default inputs."""

from __future__ import annotations

import hashlib
import json
import math
import socket
from typing import Any

import pytest
from pydantic import BaseModel

from models.canonical import evidence_hash
from models.enums import ResumeOutcome
from models.errors import FlowDefinitionError
from models.identity import MAX_ACTOR_ID, actor_id_problem, normal_actor_id
from models.tables import Event
from worker.cli.exits import RESUME_EXIT, resume_exit
from worker.flows.declarations import declare
from worker.flows.schemas import input_schema
from worker.gateway.actors import Credential, hash_credential
from worker.gateway.attempt_records import payload_hash


@input_schema("unit_measure.v1")
class Measure(BaseModel):
    amount: float = 0.0


def _sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("evidence", "canonical"),
    [
        ({"amount": 1240.0}, '{"amount":1240}'),
        ({"amount": 1e21, "small": 1e-7}, '{"amount":1e+21,"small":1e-7}'),
        ({"b": 1, "a": "é"}, '{"a":"é","b":1}'),
        ({"\u20ac": 1, "\r": 2}, '{"\\r":2,"€":1}'),
    ],
)
def test_evidence_hashes_are_over_rfc8785_canonical_json(evidence: Any, canonical: str) -> None:
    # What a client in another language computes (JCS: ECMAScript number form, UTF-16 key order)
    assert evidence_hash(evidence) == _sha(canonical)


def test_the_legacy_hash_is_kept_for_interrupts_recorded_before() -> None:
    legacy = json.dumps({"amount": 1240.0}, sort_keys=True, separators=(",", ":"))
    assert evidence_hash({"amount": 1240.0}, None) == _sha(legacy)
    assert evidence_hash({"amount": 1240.0}, None) != evidence_hash({"amount": 1240.0})


def test_evidence_that_is_not_i_json_is_the_flows_bug() -> None:
    with pytest.raises(FlowDefinitionError, match="RFC 8785"):
        declare(
            "big", kind="approval", input=Measure, authority=["a"], expires_in=1, evidence=2**60
        )


@pytest.mark.parametrize("amount", ["inf", "-Infinity", "1e309"])
def test_a_default_input_must_be_finite(amount: str) -> None:
    with pytest.raises(FlowDefinitionError, match="default input is not JSON"):
        declare(
            "d",
            kind="approval",
            input=Measure,
            authority=["a"],
            expires_in=1,
            on_expiry="default",
            default={"amount": amount},
        )
    assert not math.isfinite(float(amount))


@pytest.mark.parametrize(
    ("given", "normal"),
    [("Bob", "bob"), ("  bob\t", "bob"), ("\uff42\uff4f\uff42", "bob"), ("STRASSE", "strasse")],
)
def test_actor_ids_have_one_normal_form(given: str, normal: str) -> None:
    assert normal_actor_id(given) == normal
    assert actor_id_problem(given) is None


@pytest.mark.parametrize(
    ("given", "says"),
    [
        ("system:expiry", "reserved"),
        ("SYSTEM:x", "reserved"),
        ("worker:1", "reserved"),
        ("", "may only hold"),
        ("a b", "may only hold"),
        ("x" * 191, "may only hold"),
        ("x" * 5000, "at most"),
        (7, "text"),
    ],
)
def test_what_cannot_be_an_actor_id(given: Any, says: str) -> None:
    problem = actor_id_problem(given)
    assert problem is not None and says in problem


def test_the_longest_actor_id_fits_every_record_of_it() -> None:
    # Events name an actor as kind:id; the longest kind is "service" (columns of 200).
    longest = "x" * MAX_ACTOR_ID
    assert actor_id_problem(longest) is None
    assert len(f"service:{longest}") <= Event.__table__.c.actor.type.length  # type: ignore[attr-defined]


def test_a_held_credential_shows_nowhere() -> None:
    secret = "ilc_" + "A" * 43
    held = Credential(secret)
    assert secret not in repr(held) and secret not in str(held)
    assert secret not in repr({"c": held})
    assert held.hashed() == hash_credential(secret)
    assert Credential(None).hashed() == ""
    assert held.redact(f"token {secret}.") == "token ilc_[redacted]."
    assert Credential("my-own-secret").redact("xx my-own-secret") == "xx ilc_[redacted]"


def test_a_duplicate_exits_with_the_status_of_what_it_repeats() -> None:
    assert resume_exit(ResumeOutcome.DUPLICATE, ResumeOutcome.ACCEPTED) == 0
    assert resume_exit(ResumeOutcome.DUPLICATE, ResumeOutcome.INVALID_INPUT) == 15
    assert resume_exit(ResumeOutcome.DUPLICATE, ResumeOutcome.DENIED) == 14
    assert resume_exit(ResumeOutcome.KEY_REUSED, ResumeOutcome.ACCEPTED) == 18
    assert RESUME_EXIT[ResumeOutcome.KEY_REUSED] not in {
        s for o, s in RESUME_EXIT.items() if o is not ResumeOutcome.KEY_REUSED
    }


def test_the_payload_hash_ignores_only_the_expiry() -> None:
    contract = {"interrupt_id": "i", "input": {"a": 1}, "expires_at": "2030-01-01T00:00:00+00:00"}
    later = {**contract, "expires_at": "2031-01-01T00:00:00+00:00"}
    assert payload_hash(contract) == payload_hash(later)
    assert payload_hash(contract) != payload_hash({**contract, "interrupt_id": "j"})
    assert payload_hash(contract) != payload_hash({**contract, "input": {"a": 2}})


@pytest.mark.parametrize("configured", [None, "0.0.0.0"], ids=["default", "configured"])
def test_metrics_listen_where_interlude_metrics_host_says(
    configured: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given INTERLUDE_METRICS_HOST unset (or set), as a worker with a metrics port sees it
    from models.settings import reset_settings
    from worker.ops.stats import start_metrics_server

    if configured is None:
        monkeypatch.delenv("INTERLUDE_METRICS_HOST", raising=False)
    else:
        monkeypatch.setenv("INTERLUDE_METRICS_HOST", configured)
    reset_settings()
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    # When the exporter starts without an address (as the worker's does)
    server, _thread = start_metrics_server(port)
    try:
        # Then it listens on this machine only, unless the setting opened it
        assert server.server_address[0] == (configured or "127.0.0.1")
    finally:
        server.shutdown()
        server.server_close()
        reset_settings()
