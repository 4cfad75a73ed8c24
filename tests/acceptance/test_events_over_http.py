"""Events over HTTP and from the command line, with a real worker and ``interlude serve``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx

from tests.conftest import worker_env
from tests.resumes import wait_finished
from tests.services import ROOT, WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run, list_resume_attempts

INTERLUDE = Path(sys.executable).parent / "interlude"
PAID = {"reference": "PO-17", "amount": 1200}
SEND = [str(INTERLUDE), "events", "send"]
PAYLOAD = '{"reference": "PO-9", "amount": 5}'


def _post(server: WebServer, credential: str, body: dict[str, object]) -> httpx.Response:
    return httpx.post(
        server.url + "/v1/events",
        json=body,
        headers={"Authorization": f"Bearer {credential}"},
        timeout=30,
    )


def test_an_event_sent_over_http_first_is_kept_then_taken(
    db: str, shared_worker: WorkerProcess, web_server: WebServer
) -> None:
    bank = add_actor("bank", ["payments"], kind="service")
    run_id = enqueue_run("payment", {})
    body = {
        "run_id": run_id,
        "event": "payment_received",
        "payload": PAID,
        "actor": {"type": "service", "id": "bank"},
        "idempotency_key": "http-1",
    }
    first = _post(web_server, bank, body)
    assert first.status_code in (202,), first.text
    assert first.json()["outcome"] in ("kept", "accepted")
    assert wait_finished(run_id) == "succeeded"
    assert get_run(run_id).output["paid"] == 1200
    # The same send again is a duplicate; a wrong credential is refused and recorded
    again = _post(web_server, bank, body)
    assert (again.status_code, again.json()["outcome"]) == (200, "duplicate")
    wrong = _post(web_server, "ilc_wrong", {**body, "idempotency_key": "http-2"})
    assert wrong.status_code == 401
    assert "unauthenticated" in {a.outcome for a in list_resume_attempts(run_id=run_id)}
    spec = httpx.get(web_server.url + "/openapi.json").json()
    assert "/v1/events" in spec["paths"]


def test_interlude_events_send(db: str, database_url: str, shared_worker: WorkerProcess) -> None:
    bank = add_actor("bank", ["payments"], kind="service")
    run_id = enqueue_run("payment", {})
    env = {**os.environ, **worker_env(database_url), "INTERLUDE_ACTOR_TOKEN": bank}
    sent = subprocess.run(
        [
            *SEND,
            run_id,
            "payment_received",
            "--actor",
            "bank",
            "--payload",
            PAYLOAD,
            "--idempotency-key",
            "cli-1",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert sent.returncode == 0, sent.stderr
    assert sent.stdout.startswith(("kept", "accepted")), sent.stdout
    assert wait_finished(run_id) == "succeeded"
    refused = subprocess.run(
        [
            *SEND,
            run_id,
            "payment_received",
            "--actor",
            "bank",
            "--payload",
            PAYLOAD,
            "--idempotency-key",
            "cli-2",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 12, refused.stderr  # stale: the run finished
    assert "stale" in refused.stderr
