"""The JSON resume API of a real ``interlude serve`` process, on SQLite and PostgreSQL.

Runs reach their interrupts on a real worker; every resume goes over HTTP and must be
recorded exactly as ``submit_resume`` records it.
"""

from __future__ import annotations

import json
import re
import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import update

from models.db import transaction, utcnow
from models.tables import Interrupt
from tests.flows import agents
from tests.flows.interrupts import scratch_redis
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run, list_resume_attempts, submit_resume


@dataclass
class Api:
    server: WebServer
    credentials: dict[str, str]

    def headers(self, actor: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.credentials[actor]}", "X-Interlude-Actor": actor}

    def get(self, path: str, actor: str | None = None, **params: Any) -> httpx.Response:
        headers = self.headers(actor) if actor else {}
        return httpx.get(self.server.url + path, headers=headers, params=params, timeout=30)

    def resume(
        self, body: Any, actor: str | None, *, credential: str | None = None
    ) -> httpx.Response:
        token = credential if credential is not None else self.credentials.get(actor or "", "")
        content = body if isinstance(body, str) else None
        return httpx.post(
            self.server.url + "/v1/resume",
            json=None if content is not None else body,
            content=content,
            headers={"Authorization": f"Bearer {token}"},
            timeout=30,
        )

    def template(self, interrupt_id: str, actor: str = "alice") -> dict[str, Any]:
        response = self.get(f"/v1/interrupts/{interrupt_id}", actor)
        assert response.status_code == 200, response.text
        template: dict[str, Any] = response.json()["template"]
        return template


@pytest.fixture()
def api(db: str, shared_worker: WorkerProcess, web_server: WebServer) -> Api:
    """alice may approve, bob holds another role, carol does legal review."""
    credentials = {
        "alice": add_actor("alice", ["approver"]),
        "bob": add_actor("bob", ["viewer"]),
        "carol": add_actor("carol", ["legal"]),
    }
    return Api(web_server, credentials)


def _attempt(attempt_id: int) -> Any:
    found = [a for a in list_resume_attempts() if a.id == attempt_id]
    assert found, f"attempt {attempt_id} was not recorded"
    return found[0]


def test_health_and_openapi(web_server: WebServer) -> None:
    assert httpx.get(web_server.url + "/healthz").json() == {"status": "ok", "database": "ok"}
    spec = httpx.get(web_server.url + "/openapi.json").json()
    assert {
        "/v1/resume",
        "/v1/interrupts",
        "/v1/interrupts/{interrupt_id}",
        "/v1/runs/{run_id}",
    } <= set(spec["paths"])
    body = spec["paths"]["/v1/resume"]["post"]["requestBody"]["content"]["application/json"]
    assert body["schema"] == {"$ref": "#/components/schemas/ResumeContract"}
    assert "resume.v1" in str(spec["components"]["schemas"]["ResumeContract"])
    docs = httpx.get(web_server.url + "/docs")
    assert docs.status_code == 200
    # No page of the server may be framed; the API's answers may load or run nothing
    assert docs.headers["Content-Security-Policy"] == "frame-ancestors 'none'"
    for path in ("/healthz", "/openapi.json", "/v1/interrupts", "/nowhere"):
        answer = httpx.get(web_server.url + path)
        assert answer.headers["Content-Security-Policy"].startswith("default-src 'none'"), path
        assert answer.headers["X-Frame-Options"] == "DENY", path
        assert answer.headers["X-Content-Type-Options"] == "nosniff", path


def test_listing_is_by_role_oldest_first_with_filters_and_a_cursor(api: Api) -> None:
    # Given three approvals for alice's role and one legal review for carol's
    runs = []
    for env in ("a", "b", "c"):
        runs.append(enqueue_run("approval", {"env": env}))
        wait_pending(runs[-1])
    legal = enqueue_run("multi_gate", {"contract": "c-9"})
    wait_pending(legal, "legal")
    # When alice lists what she may answer, two at a time
    first = api.get("/v1/interrupts", "alice", limit=2)
    assert first.status_code == 200, first.text
    page = first.json()
    second = api.get("/v1/interrupts", "alice", limit=2, cursor=page["next_cursor"]).json()
    # Then she sees her three, oldest first, and nothing of carol's
    listed = [item["run_id"] for item in page["items"] + second["items"]]
    assert listed == runs
    assert second["next_cursor"] is None
    carol = api.get("/v1/interrupts", "carol").json()["items"]
    assert [(i["run_id"], i["name"]) for i in carol] == [(legal, "legal")]
    assert api.get("/v1/interrupts", "bob").json()["items"] == []
    # And the kind and age filters apply
    assert api.get("/v1/interrupts", "alice", kind="evidence").json()["items"] == []
    assert len(api.get("/v1/interrupts", "alice", kind="approval").json()["items"]) == 3
    assert api.get("/v1/interrupts", "alice", min_age=3600).json()["items"] == []
    assert len(api.get("/v1/interrupts", "alice", max_age=3600).json()["items"]) == 3
    # And bad filters are refused with one line naming the problem
    assert api.get("/v1/interrupts", "alice", kind="bogus").status_code == 422
    bad_cursor = api.get("/v1/interrupts", "alice", cursor="not-a-cursor")
    assert bad_cursor.status_code == 422
    assert bad_cursor.json()["detail"][0]["loc"] == ["query", "cursor"]


def test_reads_need_an_authenticated_actor(api: Api) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    for path in ("/v1/interrupts", f"/v1/interrupts/{interrupt.id}", f"/v1/runs/{run_id}"):
        assert api.get(path).status_code == 401
        wrong = {"Authorization": "Bearer ilc_wrong", "X-Interlude-Actor": "alice"}
        response = httpx.get(api.server.url + path, headers=wrong)
        assert response.status_code == 401
        assert response.headers["WWW-Authenticate"] == "Bearer"
        assert api.get(path, "bob").status_code == 200
    assert api.get("/v1/runs/nope", "alice").status_code == 404
    assert api.get("/v1/interrupts/nope", "alice").status_code == 404


def test_a_run_shows_its_accepted_attempt_however_many_refusals_follow(api: Api) -> None:
    # Given a run accepted over HTTP, then more than a thousand junk attempts naming it
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    template = api.get(f"/v1/interrupts/{interrupt.id}", "alice").json()["template"]
    accepted = api.resume({**template, "input": {"comment": "ok"}}, "alice").json()
    assert accepted["outcome"] == "accepted"
    for n in range(1005):
        assert submit_resume({"run_id": run_id, "junk": n}, "ilc_wrong").outcome == "malformed"
    # When anyone authenticated reads the run
    detail = api.get(f"/v1/runs/{run_id}", "bob").json()
    # Then the accepted attempt is still in its timeline, and every attempt is counted
    assert f"(attempt {accepted['attempt_id']})" in json.dumps(detail["timeline"])
    assert detail["attempt_counts"] == {"accepted": 1, "malformed": 1005}


def test_a_template_submitted_over_http_is_accepted_once(api: Api) -> None:
    # Given a waiting run and the template the API offers for its interrupt
    run_id = enqueue_run("approval", {"env": "prod", "diff": "d-7"})
    interrupt = wait_pending(run_id)
    detail = api.get(f"/v1/interrupts/{interrupt.id}", "alice").json()
    assert detail["interrupt"]["evidence"] == {"diff": "d-7"}
    template = detail["template"]
    assert template["evidence_hash"] == interrupt.evidence_hash
    assert template["actor"] == {"type": "human", "id": "alice"}
    # When alice fills in the input and submits it
    contract = {**template, "input": {"comment": "ship it"}}
    response = api.resume(contract, "alice")
    # Then it is accepted (202), recorded as submitted, and the run finishes once
    assert response.status_code == 202, response.text
    result = response.json()
    assert result["outcome"] == "accepted"
    attempt = _attempt(result["attempt_id"])
    assert (attempt.outcome, attempt.payload) == ("accepted", contract)
    assert wait_finished(run_id) == "succeeded"
    assert get_run(run_id).output["comment"] == "ship it"
    # And the server's log says what became of it, naming the run, the interrupt and the actor
    logged = f"resume accepted via the API: interrupt {interrupt.id}, actor alice, attempt "
    assert any(
        logged in line and f"[run {run_id}" in line for line in api.server.output().splitlines()
    ), api.server.output()[-2000:]
    # And the same submission again is a duplicate (200) that changes nothing
    again = api.resume(contract, "alice")
    assert again.status_code == 200
    assert (again.json()["outcome"], again.json()["original_outcome"]) == ("duplicate", "accepted")
    # And the run's timeline is readable over HTTP
    shown = api.get(f"/v1/runs/{run_id}", "bob").json()
    assert shown["run"]["state"] == "succeeded"
    assert any(entry["source"] == "resume_attempt" for entry in shown["timeline"])


REFUSALS = {
    # case: (outcome, status, what to change in a valid contract, who submits)
    "malformed": ("malformed", 422, {"schema_version": "resume.v0"}, "alice"),
    "unauthenticated": ("unauthenticated", 401, {}, "nobody"),
    "stale": ("stale", 409, {"checkpoint_id": "0" * 32}, "alice"),
    "expired": ("expired", 410, {"expires_at": "2020-01-01T00:00:00+00:00"}, "alice"),
    "denied": ("denied", 403, {"actor": {"type": "human", "id": "bob"}}, "bob"),
    "invalid_input": ("invalid_input", 422, {"input": {"amount_limit": "lots"}}, "alice"),
}


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_each_refusal_has_its_status_and_is_recorded(api: Api, case: str) -> None:
    outcome, status, change, who = REFUSALS[case]
    run_id = enqueue_run("approval", {"env": "prod"})
    contract = {**api.template(wait_pending(run_id).id), **change}
    response = api.resume(contract, who, credential="ilc_not-valid" if who == "nobody" else None)
    assert response.status_code == status, response.text
    result = response.json()
    assert result["outcome"] == outcome
    attempt = _attempt(result["attempt_id"])
    assert (attempt.outcome, attempt.reason, attempt.payload) == (
        outcome,
        result["reason"],
        contract,
    )
    assert get_run(run_id).state == "waiting"


def test_the_later_refusals_have_their_own_status_and_are_recorded(api: Api) -> None:
    # Given a waiting run, and a refused answer under a key
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    template = api.template(interrupt.id)
    refused = api.resume({**template, "input": {"amount_limit": "lots"}}, "alice")
    assert refused.status_code == 422, refused.text
    # When another contract comes under the same key, it is key_reused: 422, the caller's to fix
    reused = api.resume({**template, "input": {"comment": "fixed"}}, "alice")
    assert reused.status_code == 422, reused.text
    assert reused.json()["outcome"] == "key_reused"
    assert _attempt(reused.json()["attempt_id"]).outcome == "key_reused"
    # When the interrupt's schema is one this server loads no flow for, it is unknown_schema:
    # 503, a deployment problem and not the caller's
    with transaction() as session:
        session.execute(
            update(Interrupt)
            .where(Interrupt.id == interrupt.id)
            .values(schema_name="retired-approval")
        )
    unknown = api.resume({**template, "idempotency_key": "other"}, "alice")
    assert unknown.status_code == 503, unknown.text
    assert unknown.json()["outcome"] == "unknown_schema"
    assert _attempt(unknown.json()["attempt_id"]).outcome == "unknown_schema"
    # Then nothing moved
    assert get_run(run_id).state == "waiting"


@pytest.mark.parametrize(
    "body",
    ["{not json", "[" * 100_000 + "]" * 100_000],
    ids=["not-json", "nested-past-the-parser"],
)
def test_a_body_that_is_not_json_is_recorded_as_malformed(api: Api, body: str) -> None:
    response = api.resume(body, "alice")
    assert response.status_code == 422
    assert response.json()["outcome"] == "malformed"
    # Kept as the text sent (bounded: from anyone unauthenticated, at most 4 KB is stored).
    assert body[:100] in json.dumps(_attempt(response.json()["attempt_id"]).payload)


@pytest.mark.parametrize("path", ["/v1/runs/a%00b", "/v1/interrupts/a%00b"])
def test_an_id_with_a_nul_is_not_found(api: Api, path: str) -> None:
    # PostgreSQL refuses NUL in text: no row can hold such an id, so it names nothing
    response = api.get(path, "alice")
    assert response.status_code == 404, response.text


def test_a_missing_bearer_is_unauthenticated_and_recorded(api: Api) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    contract = api.template(wait_pending(run_id).id)
    response = httpx.post(api.server.url + "/v1/resume", json=contract)
    assert response.status_code == 401
    assert _attempt(response.json()["attempt_id"]).outcome == "unauthenticated"


def test_renewed_review_is_409_with_the_new_interrupt(api: Api) -> None:
    # Given a price approval shown at price 10, and the price changes before the answer
    redis = scratch_redis()
    sku = f"sku-{uuid.uuid4().hex[:6]}"
    redis.set(f"price:{sku}", "10")
    run_id = enqueue_run("priced", {"sku": sku})
    old = wait_pending(run_id)
    contract = {**api.template(old.id), "input": {"comment": "fine at 10"}}
    redis.set(f"price:{sku}", "12")
    # When alice submits what she was shown
    response = api.resume(contract, "alice")
    # Then 409 names the interrupt that now waits, with the new evidence and her input kept
    assert response.status_code == 409
    result = response.json()
    assert result["outcome"] == "renewed_review_required"
    renewed = api.get(f"/v1/interrupts/{result['new_interrupt_id']}", "alice").json()
    assert renewed["interrupt"]["evidence"]["price"] == "12"
    assert renewed["interrupt"]["previous_input"]["comment"] == "fine at 10"
    # And the stale contract is now refused as stale, the renewed one accepted
    assert api.resume({**contract, "idempotency_key": "again"}, "alice").status_code == 409
    accepted = api.resume(renewed["template"], "alice")
    assert accepted.status_code == 202, accepted.text
    assert wait_finished(run_id) == "succeeded"


def test_credentials_never_appear_in_logs_or_responses(api: Api) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    wrong = "ilc_" + uuid.uuid4().hex
    bodies = [
        api.get("/v1/interrupts", "alice"),
        api.get(f"/v1/interrupts/{interrupt.id}", "alice"),
        api.resume({**api.template(interrupt.id), "idempotency_key": "k1"}, "alice"),
        api.resume(
            {**api.template(interrupt.id), "idempotency_key": "k2"}, "alice", credential=wrong
        ),
        api.get(f"/v1/runs/{run_id}", "alice"),
        httpx.get(
            api.server.url + "/v1/interrupts",
            headers={"Authorization": f"Bearer {wrong}", "X-Interlude-Actor": "alice"},
        ),
        # A credential where none belongs: in the URL, which the access log quotes
        httpx.get(api.server.url + "/v1/interrupts", params={"token": api.credentials["alice"]}),
    ]
    secrets = [*api.credentials.values(), wrong]
    logged = api.server.output()
    assert "POST /v1/resume" in logged  # the log is the server's, and it saw the requests
    for secret in secrets:
        assert secret not in logged
        for response in bodies:
            assert secret not in response.text
            assert secret not in str(response.headers)
    for attempt in list_resume_attempts():
        assert not any(secret in str(attempt.payload) for secret in secrets)


@pytest.mark.slow
def test_a_flood_of_refusals_from_one_client_gets_429_and_is_counted_not_stored(
    db: str, shared_worker: WorkerProcess, start_web_server: Any
) -> None:
    # Given a server that allows three refused attempts per client and minute
    server = start_web_server(
        INTERLUDE_WEB_CLIENT_LIMIT="3/minute", INTERLUDE_WEB_ACTOR_LIMIT="1000/minute"
    )
    add_actor("alice", ["approver"])
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    api = Api(server, {"alice": "ilc_wrong"})
    body = {
        "schema_version": "resume.v1",
        "run_id": run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": "human", "id": "alice"},
        "decision": "approved",
        "input": {},
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "expires_at": (utcnow() + timedelta(minutes=5)).isoformat(),
    }
    # When a client floods the API with bad credentials
    statuses = [
        api.resume({**body, "idempotency_key": f"flood-{n}"}, "alice").status_code
        for n in range(20)
    ]
    # Then the first three are refused and recorded, the rest get 429 and are not stored
    assert statuses == [401] * 3 + [429] * 17
    assert len(list_resume_attempts(interrupt_id=interrupt.id)) == 3
    throttled = httpx.post(server.url + "/v1/resume", json=body)
    assert throttled.status_code == 429
    assert int(throttled.headers["Retry-After"]) >= 1
    # And the flood is counted, and logged once
    metrics = httpx.get(server.url + "/metrics").text
    assert 'interlude_web_throttled_total{scope="client"} 18.0' in metrics
    assert server.output().count("is throttled") == 1
    assert get_run(run_id).state == "waiting"
    # And the same client cannot go on guessing credentials at the inbox's sign-in either
    with httpx.Client(base_url=server.url) as browser:
        page = browser.get("/inbox/signin").text
        csrf = re.search(r'name="csrf" value="([^"]+)"', page)
        assert csrf is not None
        signin = {"csrf": csrf.group(1), "actor_id": "alice", "credential": "ilc_guess"}
        assert browser.post("/inbox/signin", data=signin).status_code == 429


@pytest.mark.slow
def test_refusals_are_limited_per_actor_too(
    db: str, shared_worker: WorkerProcess, start_web_server: Any
) -> None:
    # Given a server that allows two refused attempts per actor and minute
    server = start_web_server(
        INTERLUDE_WEB_CLIENT_LIMIT="1000/minute", INTERLUDE_WEB_ACTOR_LIMIT="2/minute"
    )
    credentials = {"alice": add_actor("alice", ["approver"]), "bob": add_actor("bob", ["viewer"])}
    api = Api(server, credentials)
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    # When bob keeps trying to answer what he may not
    template = api.template(interrupt.id, "bob")
    denied = [
        api.resume({**template, "idempotency_key": f"bob-{n}"}, "bob").status_code for n in range(4)
    ]
    # Then he is throttled after two refusals, and alice, from the same client, is not
    assert denied == [403, 403, 429, 429]
    accepted = api.resume(api.template(interrupt.id), "alice")
    assert accepted.status_code == 202, accepted.text
    assert wait_finished(run_id) == "succeeded"
    assert (
        'interlude_web_throttled_total{scope="actor"} 2.0'
        in httpx.get(server.url + "/metrics").text
    )
    assert server.output().count("is throttled") == 1


def test_a_tool_call_review_over_http_shows_the_call_and_takes_approve_edit_reject(
    db: str, shared_worker: WorkerProcess, web_server: WebServer
) -> None:
    api = Api(web_server, {"mia": add_actor("mia", ["manager"])})
    # Given a step's proposed refund, waiting for review
    runs = {what: enqueue_run("agent_review", {"amount": 300}) for what in ("edit", "reject")}
    asked = {what: wait_pending(run_id, "refund") for what, run_id in runs.items()}
    # Then the interrupt carries the call, and its template approves it as proposed
    detail = api.get(f"/v1/interrupts/{asked['edit'].id}", "mia").json()
    assert detail["interrupt"]["review"] == {
        "tool": "refund",
        "args": {"order": "B-7", "amount": 300},
    }
    assert detail["template"]["input"] == {"args": None, "message": ""}
    listed = api.get("/v1/interrupts", "mia").json()["items"]
    assert {i["review"]["tool"] for i in listed} == {"refund"}
    # And the OpenAPI document shows a review's answers
    spec = httpx.get(web_server.url + "/openapi.json").json()
    examples = spec["paths"]["/v1/resume"]["post"]["requestBody"]["content"]["application/json"]
    assert {"approve_call", "edit_call", "reject_call"} <= set(examples["examples"])
    assert "review" in spec["components"]["schemas"]["InterruptView"]["properties"]

    # When the manager edits the refund beyond her authority: 403 denied, recorded
    beyond = {**detail["template"], "input": {"args": {"order": "B-7", "amount": 5000}}}
    refused = api.resume(beyond, "mia")
    assert refused.status_code == 403 and refused.json()["outcome"] == "denied"
    assert "finance-lead" in refused.json()["reason"]
    assert _attempt(refused.json()["attempt_id"]).outcome == "denied"
    # When she edits it within her authority (a new key: a new answer), it runs as edited
    within = {
        **api.template(asked["edit"].id, "mia"),
        "input": {"args": {"order": "B-7", "amount": 250}},
    }
    assert api.resume(within, "mia").status_code == 202
    assert wait_finished(runs["edit"]) == "succeeded"
    assert agents.executed(runs["edit"]) == [{"order": "B-7", "amount": 250}]
    # When she rejects the other, saying why, nothing runs and the step hears why
    rejected = {
        **api.template(asked["reject"].id, "mia"),
        "decision": "rejected",
        "input": {"message": "refund the shipping only"},
    }
    assert api.resume(rejected, "mia").status_code == 202
    assert wait_finished(runs["reject"]) == "succeeded"
    assert agents.executed(runs["reject"]) == []
    assert get_run(runs["reject"]).output["told_model"] == "refund the shipping only"
