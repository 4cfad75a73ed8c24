"""The web inbox of a real ``interlude serve`` process, driven over HTTP as a browser would.

Sessions, CSRF, security headers and each outcome in words; the browser test
(``test_web_browser.py``) walks the same pages in a real Chromium.
"""

from __future__ import annotations

import html
import os
import re
import uuid
from collections.abc import Callable, Iterator

import httpx
import pytest
import redis

from models.db import utcnow
from tests.flows.interrupts import PRICE_UNAVAILABLE, scratch_redis
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess, wait_for
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run, list_resume_attempts, revoke_actor
from worker.web.sessions import KEY_PREFIX


def _hidden(page: str) -> dict[str, str]:
    found = re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page)
    return {name: html.unescape(value) for name, value in found}


def _words(page: str) -> str:
    return " ".join(html.unescape(re.sub(r"<[^>]+>", " ", page)).split())


class Browser:
    """One cookie jar: what a person's browser holds."""

    def __init__(self, server: WebServer) -> None:
        self.client = httpx.Client(base_url=server.url, follow_redirects=True, timeout=30)

    def signin(self, actor: str, credential: str) -> httpx.Response:
        form = _hidden(self.client.get("/inbox/signin").text)
        return self.client.post(
            "/inbox/signin",
            data={"csrf": form["csrf"], "actor_id": actor, "credential": credential},
        )

    def open(self, interrupt_id: str) -> tuple[str, dict[str, str]]:
        page = self.client.get(f"/inbox/interrupts/{interrupt_id}").text
        return page, _hidden(page)

    def answer(
        self, interrupt_id: str, form: dict[str, str], decision: str = "approved", **inputs: str
    ) -> httpx.Response:
        data = {**form, "decision": decision, **{f"input.{k}": v for k, v in inputs.items()}}
        return self.client.post(f"/inbox/interrupts/{interrupt_id}", data=data)


@pytest.fixture()
def people(db: str, shared_worker: WorkerProcess, web_server: WebServer) -> dict[str, str]:
    return {"alice": add_actor("alice", ["approver"]), "bob": add_actor("bob", ["viewer"])}


@pytest.fixture()
def new_browser(web_server: WebServer) -> Iterator[Callable[[], Browser]]:
    opened: list[Browser] = []

    def new() -> Browser:
        opened.append(Browser(web_server))
        return opened[-1]

    yield new
    for browser in opened:
        browser.client.close()


def test_sign_in_sets_a_strict_http_only_session_cookie(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    browser = new_browser()
    first = browser.client.get("/inbox/signin")
    assert first.headers["Content-Security-Policy"].startswith("default-src 'none'")
    assert first.headers["X-Frame-Options"] == "DENY"
    # The sign-in form's token rides in a strict, HttpOnly cookie of its own: no session yet
    token_cookie = first.headers["set-cookie"]
    assert token_cookie.startswith("interlude_signin=")
    assert all(flag in token_cookie for flag in ("HttpOnly", "SameSite=strict", "Path=/inbox"))
    assert "interlude_session" not in browser.client.cookies
    # A wrong credential is refused in words, and what was typed is not sent back
    wrong = "ilc_" + uuid.uuid4().hex
    refused = browser.signin("alice", wrong)
    assert refused.status_code == 401
    assert "wrong credential" in _words(refused.text)
    assert wrong not in refused.text
    # ... nor a credential typed into the actor id's field
    assert people["alice"] not in browser.signin(people["alice"], "x" * 12).text
    # The right one opens the inbox with a session in a strict, HttpOnly cookie; the sign-in
    # form's token is spent
    response = browser.signin("alice", people["alice"])
    assert response.status_code == 200
    assert "Waiting for you" in response.text
    set_cookie = response.history[0].headers["set-cookie"]
    assert "HttpOnly" in set_cookie
    assert "SameSite=strict" in set_cookie
    assert people["alice"] not in set_cookie
    assert "interlude_session" in browser.client.cookies
    assert "interlude_signin" not in browser.client.cookies
    # Signing out ends the session on the server
    form = _hidden(response.text)
    browser.client.post("/inbox/signout", data={"csrf": form["csrf"]})
    assert browser.client.get("/inbox").url.path == "/inbox/signin"


def test_a_visitor_who_has_not_signed_in_is_kept_nowhere(
    people: dict[str, str], web_server: WebServer
) -> None:
    # Sessions live in the broker's Redis: count them around a crowd of sign-in pages
    store = redis.Redis.from_url(os.environ["INTERLUDE_BROKER_URL"])
    before = len(store.keys(KEY_PREFIX + "*"))
    for _ in range(30):
        with httpx.Client(base_url=web_server.url) as visitor:
            assert visitor.get("/inbox/signin").status_code == 200
    assert len(store.keys(KEY_PREFIX + "*")) == before


@pytest.mark.parametrize("path", ["/inbox/signin", "/inbox/signout", "/inbox/interrupts/x"])
def test_a_form_is_read_within_bounds_before_anything_else(
    people: dict[str, str], web_server: WebServer, path: str
) -> None:
    # No cookie, no token: the body's size and kind are checked before either is looked at
    url = web_server.url + path
    big = httpx.post(url, data={"csrf": "x", "pad": "a" * 300_000}, follow_redirects=False)
    assert big.status_code == 413
    assert "larger than 256 KB" in _words(big.text)
    upload = httpx.post(url, files={"file": ("a.bin", b"0" * 1000)}, follow_redirects=False)
    assert upload.status_code == 415


def test_a_scope_nested_past_the_parser_is_a_recorded_refusal(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    browser = new_browser()
    browser.signin("alice", people["alice"])
    _, form = browser.open(interrupt.id)
    nested = "[" * 20_000 + "]" * 20_000
    response = browser.answer(interrupt.id, {**form, "scope": nested}, amount_limit="5")
    assert response.status_code in {409, 422}
    assert len(list_resume_attempts(interrupt_id=interrupt.id)) == 1
    assert get_run(run_id).state == "waiting"


def test_text_no_row_can_hold_is_not_found_not_an_error(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    # PostgreSQL refuses NUL in text: asking for it must still be an answer, not a 500
    browser = new_browser()
    assert browser.signin("ali\x00ce", people["alice"]).status_code == 401
    browser.signin("alice", people["alice"])
    assert browser.client.get("/inbox/interrupts/a%00b").status_code == 404


def test_forms_without_the_csrf_token_are_refused(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    browser = new_browser()
    # Sign-in without the token of the page it came from
    browser.client.get("/inbox/signin")
    no_token = browser.client.post(
        "/inbox/signin", data={"actor_id": "alice", "credential": people["alice"]}
    )
    assert no_token.status_code == 403
    assert "CSRF" in no_token.text
    # An answer without the token, or with another one, is refused and not submitted
    browser.signin("alice", people["alice"])
    _, form = browser.open(interrupt.id)
    without = {k: v for k, v in form.items() if k != "csrf"}
    assert browser.answer(interrupt.id, without).status_code == 403
    assert browser.answer(interrupt.id, {**form, "csrf": "forged"}).status_code == 403
    assert list_resume_attempts(interrupt_id=interrupt.id) == []
    assert get_run(run_id).state == "waiting"
    # And sign-out without it leaves the session alone
    assert browser.client.post("/inbox/signout").status_code == 403
    assert browser.client.get("/inbox").url.path == "/inbox"


def test_the_inbox_lists_what_the_actor_may_answer_oldest_first(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    runs = []
    for env in ("first", "second"):
        runs.append(enqueue_run("approval", {"env": env}))
        wait_pending(runs[-1])
    alice = new_browser()
    page = alice.signin("alice", people["alice"]).text
    links = re.findall(r'href="/inbox/interrupts/([0-9a-f]+)"', page)
    assert links == [wait_pending(r).id for r in runs]
    assert "waiting" in page
    assert "deadline in" in page
    bob = new_browser()
    assert "Nothing waits for your roles (viewer)" in _words(bob.signin("bob", people["bob"]).text)


def test_the_interrupt_page_shows_the_facts_and_a_form_from_the_schema(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    run_id = enqueue_run("approval", {"env": "prod", "diff": "d-42"})
    interrupt = wait_pending(run_id)
    browser = new_browser()
    browser.signin("alice", people["alice"])
    page, form = browser.open(interrupt.id)
    words = _words(page)
    for fact in ("deploy needs approval", "approval", "d-42", '"env": "prod"', "approver"):
        assert fact in words
    assert 'name="input.comment"' in page
    assert re.search(r'name="input.amount_limit"[^>]*type="number" step="1"', page)
    assert form["evidence_hash"] == interrupt.evidence_hash
    assert form["checkpoint_id"] == interrupt.checkpoint_id


def test_accepted_then_duplicate_then_stale_in_words(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    alice, again = new_browser(), new_browser()
    alice.signin("alice", people["alice"])
    again.signin("alice", people["alice"])
    _, form = alice.open(interrupt.id)
    _, other_form = again.open(interrupt.id)
    # The first answer is accepted and says where the run is now
    accepted = alice.answer(interrupt.id, form, comment="go", amount_limit="5")
    assert accepted.status_code == 202
    words = _words(accepted.text)
    assert "Accepted" in words
    assert re.search(r"The run is now (resuming|running|succeeded)", words)
    assert wait_finished(run_id) == "succeeded"
    assert get_run(run_id).output["comment"] == "go"
    # The same form sent twice is a duplicate; another session's answer is stale
    assert "Duplicate" in _words(
        alice.answer(interrupt.id, form, comment="go", amount_limit="5").text
    )
    stale = again.answer(interrupt.id, other_form, comment="me too")
    assert stale.status_code == 409
    assert "Stale" in _words(stale.text)
    assert "The interrupt is resolved" in _words(stale.text)


def test_renewed_review_shows_the_new_evidence_and_links_to_it(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    redis = scratch_redis()
    sku = f"sku-{uuid.uuid4().hex[:6]}"
    redis.set(f"price:{sku}", "10")
    run_id = enqueue_run("priced", {"sku": sku})
    old = wait_pending(run_id)
    browser = new_browser()
    browser.signin("alice", people["alice"])
    _, form = browser.open(old.id)
    redis.set(f"price:{sku}", "12")
    response = browser.answer(old.id, form, comment="fine at 10")
    words = _words(response.text)
    assert "Review again" in words
    assert '"price": "12"' in words
    newer = re.search(r'id="newer" href="/inbox/interrupts/([0-9a-f]+)"', response.text)
    assert newer is not None
    renewed_page, _ = browser.open(newer.group(1))
    assert "fine at 10" in _words(renewed_page)  # the previous input of the renewed review
    # The old page's form is stale now, and links to the interrupt that replaced it
    stale = _words(browser.answer(old.id, {**form, "idempotency_key": "x"}).text)
    assert "Stale" in stale
    assert "a newer interrupt" in stale


def test_a_revalidation_that_fails_says_nothing_changed(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    redis = scratch_redis()
    sku = f"sku-{uuid.uuid4().hex[:6]}"
    redis.set(f"price:{sku}", "10")
    run_id = enqueue_run("priced", {"sku": sku})
    interrupt = wait_pending(run_id)
    browser = new_browser()
    browser.signin("alice", people["alice"])
    _, form = browser.open(interrupt.id)
    redis.set(f"price:{sku}", PRICE_UNAVAILABLE)
    response = browser.answer(interrupt.id, form, comment="fine at 10")
    # The page does not claim that the evidence changed: it could not be checked
    assert response.status_code == 409
    words = _words(response.text)
    assert "Not confirmed" in words and "Nothing changed" in words
    assert "evidence changed" not in words
    assert 'id="newer"' not in response.text
    assert get_run(run_id).state == "waiting"


def test_denied_names_the_roles_needed(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = wait_pending(run_id)
    bob = new_browser()
    bob.signin("bob", people["bob"])
    page, form = bob.open(interrupt.id)
    assert "an answer will be denied" in _words(page)
    response = bob.answer(interrupt.id, form)
    assert response.status_code == 403
    assert "This needs one of the roles: approver. You hold: viewer." in _words(response.text)


def test_expired_in_words(people: dict[str, str], new_browser: Callable[[], Browser]) -> None:
    run_id = enqueue_run("approval", {"env": "prod", "expires_in": 1})
    interrupt = wait_pending(run_id)
    browser = new_browser()
    browser.signin("alice", people["alice"])
    _, form = browser.open(interrupt.id)
    wait_for(lambda: utcnow() > interrupt.deadline, timeout=10)
    response = browser.answer(interrupt.id, form)
    assert response.status_code == 410
    assert "Expired" in _words(response.text)


def test_a_revoked_actor_is_signed_out(
    people: dict[str, str], new_browser: Callable[[], Browser]
) -> None:
    browser = new_browser()
    assert browser.signin("alice", people["alice"]).url.path == "/inbox"
    revoke_actor("alice")
    assert browser.client.get("/inbox").url.path == "/inbox/signin"
