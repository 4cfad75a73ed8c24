"""The HTTP API fuzzed from its own OpenAPI document (schemathesis, every check): no answer is a
5xx and every answer is one the document describes, status, headers and body (issue 42,
finding 11). Each operation alone (examples, coverage, fuzzing; valid and invalid data), then
sequences that follow the document's links (the stateful phase): a listing to an interrupt,
its template to a resume, a resume to its run. The application in process, on SQLite and
PostgreSQL, against waiting runs of the fuzzing actor's role; bounded to a few seconds each
(INTERLUDE_FUZZ_EXAMPLES raises it).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.config import SchemathesisConfig
from schemathesis.generation.stateful.state_machine import APIStateMachine

from models.settings import reset_settings
from tests.resumes import drain_pending
from tests.webclient import api_headers, web_client
from worker import add_actor, enqueue_run, list_interrupts, list_resume_attempts
from worker.testing import TaskRecorder

EXAMPLES = int(os.environ.get("INTERLUDE_FUZZ_EXAMPLES", "10"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=list(HealthCheck),
)
# Runs waiting on an approval the fuzzing actor may give (templates it can submit as they are)
WAITING = 3


# A well-formed contract may still be refused for what no schema can say: its window has
# passed (410), or its input is not what the interrupt's own schema asks (422). Every other
# check keeps schemathesis's defaults.
ACCEPTABLE = ["2xx", "3xx", "401", "403", "404", "409", "410", "422", "429"]


@pytest.fixture()
def fuzzed_schema(db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The application as ``interlude serve`` runs it, its document loaded by schemathesis,
    called as an actor who answers approvals and operates their flows. Slack's callbacks are
    configured (without a signing secret they answer 503, as documented), so what is fuzzed
    is their signature check."""
    monkeypatch.setenv("INTERLUDE_SLACK_SIGNING_SECRET", "fuzz-signing-secret")
    reset_settings()
    credential = add_actor("fuzz", ["approver", "operator"])
    for n in range(WAITING):
        drain_pending(enqueue_run("approval", {"env": f"e{n}"}))
    config = SchemathesisConfig.from_dict(
        {
            "headers": api_headers("fuzz", credential),
            "checks": {"positive_data_acceptance": {"expected-statuses": ACCEPTABLE}},
            # Sequences follow the links with the data they carry (a template is submitted as
            # it is); each operation alone is fuzzed with invalid data too.
            "phases": {"stateful": {"generation": {"mode": "positive"}}},
        }
    )
    with web_client() as client:
        yield schemathesis.openapi.from_asgi("/openapi.json", client.app, config=config)
    monkeypatch.undo()
    reset_settings()


api = schemathesis.pytest.from_fixture("fuzzed_schema")


@api.parametrize()
@FUZZ
def test_every_operation_answers_as_documented(case: Any) -> None:
    case.call_and_validate()


def _top_up() -> None:
    """WAITING approvals pending again: a sequence answers some, and hypothesis replays what
    it drew on a server that looks the same (an empty listing would feed a link nothing)."""
    pending = [i for i in list_interrupts(status="pending") if i.name == "approve"]
    for n in range(WAITING - len(pending)):
        drain_pending(enqueue_run("approval", {"env": f"again-{n}"}))


def test_sequences_following_the_links_answer_as_documented(fuzzed_schema: Any) -> None:
    class Links(fuzzed_schema.as_state_machine()):  # type: ignore[misc]
        def setup(self) -> None:
            _top_up()

    assert issubclass(Links, APIStateMachine)
    Links.run(settings=settings(FUZZ, stateful_step_count=6))
    # (The links were followed: a template fetched from an interrupt was submitted, and got
    # past the binding checks, to be accepted or, with the expiry the fuzzer gave it, expired)
    outcomes = {attempt.outcome for attempt in list_resume_attempts()}
    assert outcomes & {"accepted", "duplicate", "expired"}, outcomes
