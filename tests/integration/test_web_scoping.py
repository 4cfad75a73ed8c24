"""Detail is scoped as listings are (issue 42, finding 2): an actor reads an interrupt only if
its roles answer it or operate (or view) its flow, and a run only if they operate or view its
flow or answer one of its interrupts. To anyone else the record is not found, exactly as an
id nobody has. The application in process, on SQLite and PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from fastapi.testclient import TestClient

from models.contracts import InterruptView
from tests.resumes import contract_for, drain_pending
from tests.webclient import api_headers, hidden_fields, sign_in, web_client
from worker import add_actor, enqueue_run, list_resume_attempts, submit_resume
from worker.testing import TaskRecorder


@dataclass
class Scene:
    client: TestClient
    credentials: dict[str, str]
    # A legal review and a finance receipt of one run (multi_gate), the finance one pending
    run_id: str
    legal: InterruptView
    finance: InterruptView

    def get(self, path: str, actor: str) -> tuple[int, str]:
        answer = self.client.get(path, headers=api_headers(actor, self.credentials[actor]))
        return answer.status_code, answer.text


@pytest.fixture()
def scene(db: str, tasks: TaskRecorder) -> Iterator[Scene]:
    credentials = {
        "lea": add_actor("lea", ["legal"]),
        "fin": add_actor("fin", ["finance"]),
        "hr": add_actor("hr", ["hr"]),
        "olga": add_actor("olga", ["operator"]),
    }
    run_id = enqueue_run("multi_gate", {"contract": "c-1"})
    legal = drain_pending(run_id, "legal")
    accepted = submit_resume(contract_for(legal, "lea"), credentials["lea"])
    assert accepted.outcome == "accepted", accepted.reason
    finance = drain_pending(run_id, "finance")
    with web_client() as client:
        yield Scene(client, credentials, run_id, legal, finance)


def _as_missing(text: str, real_id: str) -> str:
    return text.replace(real_id, "ID")


def _nobodys(real_id: str) -> str:
    """An id of the same length that nothing has."""
    return "f" * len(real_id)


def test_an_interrupt_is_read_by_the_roles_it_asks_and_its_flows_operators(scene: Scene) -> None:
    path = f"/v1/interrupts/{scene.finance.id}"
    for reader in ("fin", "olga"):
        status, body = scene.get(path, reader)
        assert status == 200, body
        assert '"po":"PO-7"' in body
    # And the evidence of an interrupt of the same run is not the finance role's to read
    assert scene.get(f"/v1/interrupts/{scene.legal.id}", "fin")[0] == 404
    assert scene.get(f"/v1/interrupts/{scene.legal.id}", "lea")[0] == 200


def test_to_another_role_an_interrupt_is_not_found_as_an_id_nobody_has(scene: Scene) -> None:
    real = scene.finance.id
    status, body = scene.get(f"/v1/interrupts/{real}", "hr")
    missing_status, missing_body = scene.get(f"/v1/interrupts/{_nobodys(real)}", "hr")
    assert (status, missing_status) == (404, 404)
    assert "PO-7" not in body
    assert _as_missing(body, real) == _as_missing(missing_body, _nobodys(real))


def test_a_run_is_read_by_its_operators_and_the_roles_its_interrupts_ask(scene: Scene) -> None:
    path = f"/v1/runs/{scene.run_id}"
    for reader in ("olga", "lea", "fin"):
        status, body = scene.get(path, reader)
        assert status == 200, (reader, body)
    status, body = scene.get(path, "hr")
    missing_status, missing_body = scene.get(f"/v1/runs/{_nobodys(scene.run_id)}", "hr")
    assert (status, missing_status) == (404, 404)
    assert "c-1" not in body
    assert _as_missing(body, scene.run_id) == _as_missing(missing_body, _nobodys(scene.run_id))


def test_a_flows_viewer_role_reads_without_answering(db: str, tasks: TaskRecorder) -> None:
    # The approval test flow names "viewer" among its viewer_roles
    bob = add_actor("bob", ["viewer"])
    run_id = enqueue_run("approval", {"env": "prod", "diff": "d-9"})
    interrupt = drain_pending(run_id)
    with web_client() as client:
        shown = client.get(f"/v1/interrupts/{interrupt.id}", headers=api_headers("bob", bob))
        assert shown.status_code == 200
        assert shown.json()["interrupt"]["evidence"] == {"diff": "d-9"}
        run = client.get(f"/v1/runs/{run_id}", headers=api_headers("bob", bob))
        assert run.status_code == 200


def test_the_inbox_page_of_another_roles_interrupt_is_not_found(scene: Scene) -> None:
    # Given hr signed in to the inbox
    sign_in(scene.client, "hr", scene.credentials["hr"])
    real = scene.finance.id
    # When hr opens the finance interrupt's page, and the page of an id nobody has
    page = scene.client.get(f"/inbox/interrupts/{real}")
    missing = scene.client.get(f"/inbox/interrupts/{_nobodys(real)}")
    # Then both are the same "not found", and nothing of the evidence is shown
    assert (page.status_code, missing.status_code) == (404, 404)
    assert "PO-7" not in page.text
    assert _as_missing(page.text, real) == _as_missing(missing.text, _nobodys(real))


def test_an_inbox_answer_to_another_roles_interrupt_is_recorded_and_not_found(
    scene: Scene,
) -> None:
    # Given hr signed in, posting an answer to the finance interrupt it cannot see
    sign_in(scene.client, "hr", scene.credentials["hr"])
    csrf = hidden_fields(scene.client.get("/inbox").text)["csrf"]
    form = {
        "csrf": csrf,
        "decision": "approved",
        "run_id": scene.run_id,
        "checkpoint_id": scene.finance.checkpoint_id,
        "evidence_hash": scene.finance.evidence_hash,
        "scope": '{"contract": "c-1", "team": "ap"}',
        "idempotency_key": "k-hr",
        "expires_at": "2999-01-01T00:00:00+00:00",
        "input.invoice": "INV-1",
        "input.total": "3",
    }
    answer = scene.client.post(f"/inbox/interrupts/{scene.finance.id}", data=form)
    # Then the page says not found, and the refusal is recorded all the same
    assert answer.status_code == 404
    assert "PO-7" not in answer.text
    refused = list_resume_attempts(interrupt_id=scene.finance.id)
    assert [(a.actor_id, a.outcome) for a in refused] == [("hr", "denied")]
