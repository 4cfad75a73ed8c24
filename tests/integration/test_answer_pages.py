"""Answer links and bulk review over HTTP, in process (httpx over the ASGI app), both databases.

The pages run the server's own code against the real database; what the browser sees end to
end is tests/acceptance/test_answer_by_email.py.
"""

from __future__ import annotations

import html
import logging
import re
import uuid
from collections.abc import Iterator

import pytest
from sqlalchemy import func, select

from models.db import transaction
from models.settings import get_settings, reset_settings
from models.tables import ResumeAttempt
from tests.asgi import AsgiClient
from tests.flows.interrupts import scratch_redis
from tests.resumes import contract_for, drain_pending
from worker import add_actor, enqueue_run, get_interrupt, submit_resume
from worker.gateway.answer_links import issue_links
from worker.testing import TaskRecorder
from worker.web.asgi import create_app
from worker.web.links import RedactLinkTokens

SECRET = "p" * 40
pytestmark = pytest.mark.usefixtures("scratch")


@pytest.fixture()
def client(db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch) -> Iterator[AsgiClient]:
    monkeypatch.setenv("INTERLUDE_LINK_SECRET", SECRET)
    monkeypatch.setenv("INTERLUDE_WEB_CLIENT_LIMIT", "10000/minute")
    monkeypatch.setenv("INTERLUDE_WEB_ACTOR_LIMIT", "10000/minute")
    reset_settings()
    test_client = AsgiClient(create_app(get_settings()))
    yield test_client
    test_client.close()
    monkeypatch.undo()
    reset_settings()


def _attempts() -> int:
    with transaction(readonly=True) as session:
        return int(session.execute(select(func.count()).select_from(ResumeAttempt)).scalar_one())


def test_opening_a_link_shows_the_evidence_and_changes_nothing(client: AsgiClient) -> None:
    add_actor("alice", ["approver"])
    run_id = enqueue_run("approval", {"env": "prod", "diff": "d-web"})
    interrupt = drain_pending(run_id)
    (link,) = issue_links(interrupt.id, ["alice"])
    path = link.url("").removeprefix("")
    for _ in range(3):
        page = client.get(path)
        assert page.status_code == 200
        assert "d-web" in page.text and 'id="approve"' in page.text
    assert _attempts() == 0 and get_interrupt(interrupt.id).status == "pending"
    # And confirming answers, once; a second confirm is a duplicate
    first = client.post(path, data={"decision": "approved"})
    assert first.status_code == 202 and "Accepted" in first.text
    second = client.post(path, data={"decision": "approved"})
    assert second.status_code == 200 and "Duplicate" in second.text
    assert _attempts() == 2


def test_a_link_with_required_input_shows_the_form_and_submits_it(client: AsgiClient) -> None:
    add_actor("alice", ["approver"])
    run_id = enqueue_run("linked", {"po": True})
    interrupt = drain_pending(run_id)
    (link,) = issue_links(interrupt.id, ["alice"])
    path = link.url("")
    assert 'name="input.po_number"' in client.get(path).text
    answered = client.post(path, data={"decision": "approved", "input.po_number": "PO-17"})
    assert answered.status_code == 202, answered.text
    tasks_state = get_interrupt(interrupt.id)
    assert tasks_state.resume_input == {"po_number": "PO-17", "note": ""}


def test_a_stale_link_says_where_the_run_waits_now(client: AsgiClient) -> None:
    credential = add_actor("alice", ["approver"])
    scratch_redis().set("price:sku-w", "10")
    old = drain_pending(enqueue_run("priced", {"sku": "sku-w"}))
    (link,) = issue_links(old.id, ["alice"])
    scratch_redis().set("price:sku-w", "11")
    renewed = submit_resume(contract_for(old, "alice"), credential)
    assert renewed.new_interrupt_id is not None
    # The page says so before anyone confirms
    page = client.get(link.url(""))
    assert f'href="/inbox/interrupts/{renewed.new_interrupt_id}"' in page.text
    # And confirming anyway is refused as stale, recorded, pointing to the new interrupt
    answered = client.post(link.url(""), data={"decision": "approved"})
    assert answered.status_code == 409 and "Stale" in answered.text
    assert f'href="/inbox/interrupts/{renewed.new_interrupt_id}"' in answered.text


def test_a_token_that_is_not_a_link_is_a_404_page_and_a_recorded_refusal_on_confirm(
    client: AsgiClient,
) -> None:
    fake = "ila_" + "0" * 32 + "." + "A" * 43 + "." + "B" * 43
    assert client.get(f"/inbox/a/{fake}").status_code == 404
    assert _attempts() == 0
    assert client.post(f"/inbox/a/{fake}", data={"decision": "approved"}).status_code == 401
    assert _attempts() == 1


def test_the_access_log_does_not_keep_link_tokens() -> None:
    token = "ila_" + "a" * 32 + "." + "B" * 43 + "." + "C" * 43
    record = logging.LogRecord(
        "uvicorn.access",
        logging.INFO,
        "",
        0,
        '%s - "%s %s HTTP/%s" %d',
        ("127.0.0.1:5", "GET", f"/inbox/a/{token}", "1.1", 200),
        None,
    )
    RedactLinkTokens().filter(record)
    line = record.getMessage()
    assert token not in line and "/inbox/a/ila_[redacted]" in line


def _sign_in(client: AsgiClient, actor: str, credential: str) -> None:
    page = client.get("/inbox/signin")
    csrf = re.search(r'name="csrf" value="([^"]+)"', page.text)
    assert csrf is not None
    done = client.post(
        "/inbox/signin",
        data={"csrf": csrf.group(1), "actor_id": actor, "credential": credential},
        follow_redirects=False,
    )
    assert done.status_code == 303


def _csrf(text: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', text)
    assert found is not None
    return found.group(1)


def test_bulk_review_of_twenty_with_one_stale_in_the_inbox(client: AsgiClient) -> None:
    # Given twenty approvals waiting for alice
    credential = add_actor("alice", ["approver"])
    runs = [enqueue_run("approval", {"env": "prod", "diff": f"d-{n}"}) for n in range(20)]
    waiting = [drain_pending(run_id) for run_id in runs]
    _sign_in(client, "alice", credential)
    # When she picks all twenty and asks to review them
    listing = client.get("/inbox/bulk?kind=approval")
    assert all(f'value="{i.id}"' in listing.text for i in waiting)
    review = client.post(
        "/inbox/bulk/review",
        data={"csrf": _csrf(listing.text), "decision": "approved", "pick": [i.id for i in waiting]},
    )
    # Then the page lists every evidence before the confirm
    assert review.status_code == 200, review.text
    for n, interrupt in enumerate(waiting):
        assert f'id="evidence-{interrupt.id}"' in review.text and f"d-{n}" in review.text
    assert review.text.index('id="confirm"') > review.text.index(f'id="evidence-{waiting[-1].id}"')
    # And when one of them is answered elsewhere meanwhile
    assert submit_resume(contract_for(waiting[7], "alice"), credential).accepted
    confirm = client.post(
        "/inbox/bulk/confirm",
        data={
            "csrf": _csrf(review.text),
            "decision": "approved",
            "batch": re.search(r'name="batch" value="([^"]+)"', review.text).group(1),  # type: ignore[union-attr]
            # (as a browser sends them: the attribute's entities decoded)
            "binding": [
                html.unescape(b) for b in re.findall(r'name="binding" value="([^"]+)"', review.text)
            ],
        },
    )
    # Then each outcome is shown: 19 accepted, 1 stale; all twenty recorded
    assert confirm.status_code == 200, confirm.text
    assert "19 accepted, 1 stale" in confirm.text
    assert f'id="outcome-{waiting[7].id}">stale' in confirm.text
    assert _attempts() == 21


def test_bulk_forms_are_refused_as_every_form_is(
    db: str, tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given an approver signed in, with an approval waiting, each actor allowed two refusals
    # (the counters outlive the test: an actor of its own)
    monkeypatch.setenv("INTERLUDE_WEB_CLIENT_LIMIT", "10000/minute")
    monkeypatch.setenv("INTERLUDE_WEB_ACTOR_LIMIT", "2/minute")
    reset_settings()
    client = AsgiClient(create_app(get_settings()))
    try:
        actor = f"approver-{uuid.uuid4().hex[:12]}"
        credential = add_actor(actor, ["approver"])
        waiting = drain_pending(enqueue_run("approval", {"env": "prod", "diff": "d"}))
        _sign_in(client, actor, credential)
        listing = client.get("/inbox/bulk?kind=approval")
        picked = {"decision": "approved", "pick": [waiting.id]}
        # When a review is posted without the session's CSRF token, or with another one
        for form in (picked, {**picked, "csrf": "forged"}):
            refused = client.post("/inbox/bulk/review", data=form)
            # Then it is refused with the reason, as the inbox's own forms are
            assert refused.status_code == 403 and "CSRF" in refused.text
        # And signed out, a review is sent to sign in
        elsewhere = AsgiClient(create_app(get_settings()))
        try:
            form = {**picked, "csrf": _csrf(listing.text)}
            away = elsewhere.post("/inbox/bulk/review", data=form, follow_redirects=False)
            assert away.status_code == 303 and away.headers["location"] == "/inbox/signin"
            # And once the actor's refusals are used up (two wrong credentials at sign-in)
            page = elsewhere.get("/inbox/signin")
            for _ in range(2):
                wrong = {"csrf": _csrf(page.text), "actor_id": actor, "credential": "wrong"}
                assert elsewhere.post("/inbox/signin", data=wrong).status_code == 401
        finally:
            elsewhere.close()
        # Then a confirm of the signed-in session is throttled before anything is answered
        before = _attempts()
        confirm = client.post(
            "/inbox/bulk/confirm",
            data={"csrf": _csrf(listing.text), "decision": "approved", "binding": ["{}"]},
        )
        assert confirm.status_code == 429 and "Too many" in confirm.text
        assert _attempts() == before
        assert get_interrupt(waiting.id).status == "pending"
    finally:
        client.close()
        monkeypatch.undo()
        reset_settings()
