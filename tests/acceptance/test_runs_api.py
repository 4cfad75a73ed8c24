"""Runs over HTTP against a real ``interlude serve`` and a real worker, on both databases:
start (idempotent by key, by the flow's operator or starter roles), list (the CLI's filters,
a cursor, scoped to the flows the caller reads), cancel, pause, retry and fork (the CLI's
verbs: authorized and recorded by them, ids as unique prefixes).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.flows.history import shipments
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run
from worker.runs import list_events

MISSING = "f" * 32


@dataclass
class RunsApi:
    server: WebServer
    credentials: dict[str, str]

    def headers(self, actor: str | None) -> dict[str, str]:
        if actor is None:
            return {}
        token = self.credentials.get(actor, "ilc_not-a-credential")
        return {"Authorization": f"Bearer {token}", "X-Interlude-Actor": actor}

    def get(self, path: str, actor: str | None, **params: Any) -> httpx.Response:
        return httpx.get(
            self.server.url + path, headers=self.headers(actor), params=params, timeout=30
        )

    def post(self, path: str, actor: str | None, body: Any = None, **kw: Any) -> httpx.Response:
        return httpx.post(
            self.server.url + path, headers=self.headers(actor), json=body, timeout=30, **kw
        )

    def listed(self, actor: str, **params: Any) -> list[str]:
        response = self.get("/v1/runs", actor, **params)
        assert response.status_code == 200, response.text
        return [item["id"] for item in response.json()["items"]]


@pytest.fixture()
def api(db: str, shared_worker: WorkerProcess, web_server: WebServer) -> RunsApi:
    """olga operates every flow of the tests; sid is a service that may only start shipping;
    ann answers approvals; vic holds no role any flow knows."""
    credentials = {
        "olga": add_actor("olga", ["operator"]),
        "sid": add_actor("sid", ["shipper"], kind="service"),
        "ann": add_actor("ann", ["approver"]),
        "vic": add_actor("vic", ["visitor"]),
    }
    return RunsApi(web_server, credentials)


def refusals(run_id: str) -> list[tuple[str, str, str]]:
    return [
        (e.actor, e.detail["action"], e.detail["outcome"])
        for e in list_events(run_id)
        if e.trigger == "operator_refused"
    ]


def test_a_run_is_started_by_its_flows_starters_once_per_key(api: RunsApi) -> None:
    order = {"flow": "shipping", "input": {"order": "o-1"}, "idempotency_key": "ship-o-1"}
    # When nobody, then an approver, asks to start a shipping run
    assert api.post("/v1/runs", None, order).status_code == 401
    denied = api.post("/v1/runs", "ann", order)
    # Then neither starts anything: the approver holds none of its starter roles
    assert denied.status_code == 403, denied.text
    assert "shipper" in denied.json()["detail"] and "operator" in denied.json()["detail"]
    assert api.listed("olga") == []
    # When the shipping service starts it, twice with one key
    first = api.post("/v1/runs", "sid", order)
    again = api.post("/v1/runs", "sid", order)
    # Then one run starts, recorded as the service's; the second answer is that same run
    assert first.status_code == 201, first.text
    assert again.status_code == 200, again.text
    run_id = first.json()["run_id"]
    assert again.json() == {**first.json(), "created": False, "state": again.json()["state"]}
    assert wait_finished(run_id) == "succeeded"
    assert get_run(run_id).started_by == "sid"
    assert shipments("o-1") == 1
    # And the key is the service's: an operator using it is refused, nothing started
    taken = api.post("/v1/runs", "olga", order)
    assert taken.status_code == 422 and "another starter" in taken.json()["detail"]
    # And the flow's operator starts runs too (no key: a new run each time)
    by_olga = api.post("/v1/runs", "olga", {"flow": "shipping", "input": {"order": "o-2"}})
    assert by_olga.status_code == 201 and by_olga.json()["run_id"] != run_id
    # And what cannot start a run is refused in one line, naming what is wrong
    for body, status, said in (
        ({"flow": "nowhere"}, 404, "no flow 'nowhere'"),
        ({"flow": "shipping", "extra": 1}, 422, "extra"),
        ({"input": {}}, 422, "flow"),
        ({"flow": "fragile", "input": {"amount": "many"}}, 422, "amount"),
    ):
        refused = api.post("/v1/runs", "olga", body)
        assert refused.status_code == status, (body, refused.text)
        assert said in refused.json()["detail"], (body, refused.text)
    not_json = httpx.post(
        api.server.url + "/v1/runs", headers=api.headers("olga"), content=b"{", timeout=30
    )
    assert not_json.status_code == 422 and "not JSON" in not_json.json()["detail"]
    assert len(api.listed("olga", flow="shipping")) == 2


def test_the_listing_filters_pages_newest_first_and_shows_only_what_the_caller_reads(
    api: RunsApi,
) -> None:
    # Given three shipping runs by two starters and an approval that waits
    shipped = [
        enqueue_run("shipping", {"order": f"l-{n}"}, started_by=starter)
        for n, starter in enumerate(["sid", "sid", "olga"])
    ]
    for run_id in shipped:
        assert wait_finished(run_id) == "succeeded"
    waiting = enqueue_run("approval", {"env": "prod"}, started_by="olga")
    wait_pending(waiting)
    newest_first = [waiting, *reversed(shipped)]
    # When the operator pages through every run, two at a time
    first = api.get("/v1/runs", "olga", limit=2).json()
    second = api.get("/v1/runs", "olga", limit=2, cursor=first["next_cursor"]).json()
    # Then she sees them newest first, each once, and the last page says so
    assert [i["id"] for i in first["items"] + second["items"]] == newest_first
    assert second["next_cursor"] is None
    assert first["items"][0]["flow_name"] == "approval"
    assert first["items"][0]["started_by"] == "olga"
    # And the CLI's filters apply, alone and together
    assert api.listed("olga", flow="shipping") == list(reversed(shipped))
    assert api.listed("olga", state="waiting") == [waiting]
    assert api.listed("olga", started_by="SID") == list(reversed(shipped[:2]))
    assert api.listed("olga", flow="shipping", started_by="olga") == [shipped[2]]
    assert api.listed("olga", older_than=3600) == []
    assert api.listed("olga", older_than=0) == newest_first
    # And the listing holds only flows whose operator (or viewer) roles the caller holds
    assert api.listed("vic") == []
    assert api.listed("ann") == []
    assert api.listed("sid") == []
    # And bad filters are refused with one line naming the problem
    for params, said in (
        ({"state": "sleeping"}, "sleeping"),
        ({"cursor": "not-a-cursor"}, "cursor"),
        ({"limit": 0}, "limit"),
        ({"older_than": -1}, "older_than"),
    ):
        refused = api.get("/v1/runs", "olga", **params)
        assert refused.status_code == 422, (params, refused.text)
        assert said in str(refused.json()["detail"]), (params, refused.text)
    assert api.get("/v1/runs", None).status_code == 401


def test_cancel_and_pause_are_the_cli_verbs_with_their_authority_and_records(
    api: RunsApi,
) -> None:
    # Given two approvals waiting
    first = enqueue_run("approval", {"env": "prod"})
    second = enqueue_run("approval", {"env": "stage"})
    wait_pending(first)
    wait_pending(second)
    # When the operator pauses one and cancels the other, naming them by prefixes
    paused = api.post(f"/v1/runs/{first[:8]}/pause", "olga")
    cancelled = api.post(f"/v1/runs/{second[:10]}/cancel", "olga", {"reason": "not needed"})
    # Then both are done and say who did them
    assert paused.status_code == 200, paused.text
    assert paused.json() == {"run_id": first, "state": "waiting", "by": "human:olga"}
    assert get_run(first).pause_requested_by == "human:olga"
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json() == {"run_id": second, "state": "cancelled", "by": "human:olga"}
    assert get_run(second).error == "not needed"
    # When the approver (who reads the run: its interrupt asks her role) tries to cancel
    denied = api.post(f"/v1/runs/{first}/cancel", "ann")
    # Then she is refused as the CLI refuses her, and the refusal is on the run's record
    assert denied.status_code == 403, denied.text
    assert "operator" in denied.json()["detail"]
    # When someone who may not read the run names it exactly, or gives no credential
    hidden = api.post(f"/v1/runs/{first}/cancel", "vic")
    missing = api.post(f"/v1/runs/{MISSING}/cancel", "vic")
    stranger = api.post(f"/v1/runs/{first}/cancel", None)
    wrong = api.post(f"/v1/runs/{first}/pause", "mallory")
    # Then the run they may not read answers as a missing one, word for word but its id
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["detail"].replace(first, "ID") == missing.json()["detail"].replace(
        MISSING, "ID"
    )
    assert stranger.status_code == wrong.status_code == 401
    # And every refusal is recorded on the run, as the CLI's are, and nothing changed
    assert refusals(first) == [
        ("human:ann", "cancel", "denied"),
        ("human:vic", "cancel", "denied"),
        ("human:mallory", "pause", "unauthenticated"),
    ]
    assert get_run(first).state == "waiting"
    # And what the run's state does not allow is a 409; a bad body a 422
    again = api.post(f"/v1/runs/{second}/retry", "olga")
    assert again.status_code == 409 and "retry" in again.json()["detail"]
    bad = api.post(f"/v1/runs/{first}/cancel", "olga", {"reason": 5})
    assert bad.status_code == 422 and "reason" in bad.json()["detail"]
    short = api.post(f"/v1/runs/{first[:3]}/cancel", "olga")
    assert short.status_code == 422 and "too short" in short.json()["detail"]


def test_retry_continues_a_failed_run_and_fork_starts_one_from_a_step(
    api: RunsApi, tmp_path: Path
) -> None:
    # Given a run that failed (its gate is missing) and a shipping run that shipped once
    gate = tmp_path / "gate"
    failed = enqueue_run("cli_retried", {"gate": str(gate)})
    assert wait_finished(failed) == "failed"
    shipped = enqueue_run("shipping", {"order": "f-1"})
    assert wait_finished(shipped) == "succeeded"
    # When the operator retries the failed run once its gate exists
    gate.write_text("open", encoding="utf-8")
    retried = api.post(f"/v1/runs/{failed[:8]}/retry", "olga", {"reason": "gate fixed"})
    # Then it continues and succeeds
    assert retried.status_code == 200, retried.text
    assert retried.json()["by"] == "human:olga"
    assert wait_finished(failed) == "succeeded"
    # When she forks the shipping run from its effect's step, by a prefix
    forked = api.post(f"/v1/runs/{shipped[:8]}/fork", "olga", {"from_step": "send"})
    # Then a new run starts there, linked both ways, and the shipment is not made again
    assert forked.status_code == 201, forked.text
    fork_id = forked.json()["run_id"]
    assert forked.json() == {
        "run_id": fork_id,
        "forked_from": shipped,
        "from_step": "send",
        "by": "human:olga",
    }
    assert wait_finished(fork_id) == "succeeded"
    assert get_run(fork_id).forked_from == shipped
    assert get_run(shipped).forks == [fork_id]
    assert shipments("f-1") == 1
    # And a step the run never reached, or a fork by a non-operator, is refused
    nowhere = api.post(f"/v1/runs/{shipped}/fork", "olga", {"from_step": "fly"})
    assert nowhere.status_code == 422 and "never reached step 'fly'" in nowhere.json()["detail"]
    assert api.post(f"/v1/runs/{shipped}/fork", "sid", {"from_step": "send"}).status_code == 404
    assert refusals(shipped) == [("service:sid", "fork", "denied")]
    assert api.post(f"/v1/runs/{shipped}/fork", "olga", {}).status_code == 422


def body_of(spec: dict[str, Any], operation: dict[str, Any]) -> dict[str, Any]:
    """The properties of an operation's JSON body, inline or a component."""
    schema: dict[str, Any] = operation["requestBody"]["content"]["application/json"]["schema"]
    if "$ref" in schema:
        schema = spec["components"]["schemas"][schema["$ref"].rsplit("/", 1)[-1]]
    properties: dict[str, Any] = schema["properties"]
    return properties


def test_the_openapi_document_covers_the_runs_api(web_server: WebServer) -> None:
    spec = httpx.get(web_server.url + "/openapi.json").json()
    paths = spec["paths"]
    assert {"post", "get"} <= set(paths["/v1/runs"])
    for verb in ("cancel", "pause", "retry", "fork"):
        operation = paths[f"/v1/runs/{{run_id}}/{verb}"]["post"]
        assert {"401", "403", "404", "409", "422"} <= set(operation["responses"]), verb
    assert "from_step" in body_of(spec, paths["/v1/runs/{run_id}/fork"]["post"])
    assert "idempotency_key" in body_of(spec, paths["/v1/runs"]["post"])
    listing = {p["name"] for p in paths["/v1/runs"]["get"]["parameters"]}
    assert {"state", "flow", "started_by", "older_than", "cursor", "limit"} <= listing
