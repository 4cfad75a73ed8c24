"""The operators' console in a real headless Chromium against ``interlude serve`` and a real
worker: list runs, filter them, open one, fork it from a step and follow the fork's links; the
inbox's cards tell two requests apart. Its forms over plain HTTP: CSRF, roles and scoping.

Needs Debian's ``chromium`` and ``chromium-driver``, as ``test_web_browser`` does.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select, WebDriverWait

from tests.acceptance.test_web_browser import new_browser, sign_in  # noqa: F401
from tests.flows.history import shipments
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess, wait_for
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run
from worker.runs import list_events


def rows(browser: WebDriver) -> list[str]:
    found = browser.find_elements(By.CSS_SELECTOR, "tr.run")
    return [str(row.get_attribute("data-run")) for row in found]


def go(browser: WebDriver, by: str, what: str) -> None:
    """Click the element and wait for the page it leads to (not read the old one again).

    The old page is marked in its window, which a new document does not carry. Asking whether
    the old page's element went stale instead races the navigation: chromedriver can answer
    that with an inspector error rather than a stale element, so the wait ignores errors met
    while the page changes."""
    browser.execute_script("window.leftBehind = true;")
    browser.find_element(by, what).click()
    WebDriverWait(browser, 20, ignored_exceptions=(WebDriverException,)).until(
        lambda driver: driver.execute_script(
            "return window.leftBehind === undefined && document.readyState === 'complete';"
        )
    )


def filter_by(browser: WebDriver, *, flow: str = "", state: str = "") -> None:
    Select(browser.find_element(By.ID, "flow")).select_by_value(flow)
    Select(browser.find_element(By.ID, "state")).select_by_value(state)
    go(browser, By.ID, "apply")


def test_an_operator_lists_filters_opens_and_forks_a_run_in_the_browser(
    db: str,
    shared_worker: WorkerProcess,
    web_server: WebServer,
    new_browser: Callable[[], WebDriver],  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given two shipping runs that shipped and an approval that waits
    credential = add_actor("olga", ["operator"])
    shipped = [enqueue_run("shipping", {"order": f"b-{n}"}, started_by="sid") for n in (1, 2)]
    for run_id in shipped:
        assert wait_finished(run_id) == "succeeded"
    waiting = enqueue_run("approval", {"env": "prod"})
    wait_pending(waiting)
    # When the operator signs in and opens the runs
    browser = new_browser()
    sign_in(browser, web_server, "olga", credential)
    go(browser, By.ID, "nav-runs")
    # Then she sees all three, newest first, and how many are in each state
    assert rows(browser) == [waiting, shipped[1], shipped[0]]
    assert browser.find_element(By.ID, "count-succeeded").text == "succeeded 2"
    assert browser.find_element(By.ID, "count-waiting").text == "waiting 1"
    # When she filters by flow, then by state
    filter_by(browser, flow="shipping")
    assert rows(browser) == [shipped[1], shipped[0]]
    filter_by(browser, flow="shipping", state="waiting")
    assert rows(browser) == []
    filter_by(browser, state="waiting")
    assert rows(browser) == [waiting]
    go(browser, By.ID, "count-succeeded")
    assert rows(browser) == [shipped[1], shipped[0]]
    # When she opens the first shipping run
    go(browser, By.CSS_SELECTOR, f'tr[data-run="{shipped[0]}"] a.run-link')
    # Then she reads its state, input, steps with what each changed, effects and timeline
    assert browser.find_element(By.ID, "run-state").text == "succeeded"
    assert "b-1" in browser.find_element(By.ID, "input").text
    steps = browser.find_elements(By.CSS_SELECTOR, "tr.step")
    assert [s.get_attribute("data-step") for s in steps] == ["pack", "send", "close"]
    assert "S-b-1-1" in steps[1].text  # the shipment's receipt, set by the send step
    assert "applied" in browser.find_element(By.ID, "effects").text
    assert "enqueue" in browser.find_element(By.ID, "timeline").text
    assert browser.find_elements(By.ID, "actions") == []  # nothing to cancel: it finished
    # When she forks it from the send step, confirming on the page that says what happens
    go(browser, By.CSS_SELECTOR, 'tr[data-step="send"] a.fork-from')
    assert "Fork run" in browser.find_element(By.ID, "confirm-title").text
    assert "not repeated" in browser.find_element(By.ID, "explained").text
    screenshot = tmp_path / "console-fork.png"
    assert browser.save_screenshot(str(screenshot))
    go(browser, By.ID, "confirm")
    # Then the new run is linked from the answer, and links back to its origin
    go(browser, By.ID, "new-fork")
    fork_id = browser.current_url.rsplit("/", 1)[-1]
    assert get_run(fork_id).forked_from == shipped[0]
    assert wait_finished(fork_id) == "succeeded"
    go(browser, By.ID, "forked-from")
    assert browser.current_url.endswith(f"/console/runs/{shipped[0]}")
    # And the origin lists its fork, and the shipment was not made again
    links = browser.find_elements(By.CSS_SELECTOR, "#forks a.fork-link")
    assert [link.text for link in links] == [fork_id]
    go(browser, By.CSS_SELECTOR, "#forks a.fork-link")
    assert browser.find_element(By.ID, "run-state").text == "succeeded"
    assert shipments("b-1") == 1
    forked = [e for e in list_events(shipped[0]) if e.trigger == "forked"]
    assert forked and forked[0].actor == "human:olga"


def test_inbox_cards_tell_two_requests_apart(
    db: str,
    shared_worker: WorkerProcess,
    web_server: WebServer,
    new_browser: Callable[[], WebDriver],  # noqa: F811
) -> None:
    # Given two approvals of one flow that differ only in their scope and evidence
    credential = add_actor("ann", ["approver"])
    prod = enqueue_run("approval", {"env": "prod", "diff": "v7"})
    wait_pending(prod)  # (asked first: the inbox lists it first)
    stage = enqueue_run("approval", {"env": "stage", "diff": "v8"})
    wait_pending(stage)
    # When the approver opens her inbox
    browser = new_browser()
    sign_in(browser, web_server, "ann", credential)
    cards = [card.text for card in browser.find_elements(By.CSS_SELECTOR, "li.card")]
    # Then each card names its flow and run, and says its scope and evidence in a line
    assert len(cards) == 2
    assert "flow approval" in cards[0] and prod[:12] in cards[0]
    assert "scope: action: deploy · env: prod" in cards[0]
    assert "evidence: diff: v7" in cards[0]
    assert "env: stage" in cards[1] and "diff: v8" in cards[1] and stage[:12] in cards[1]
    # And the card's run link opens the run (her role is asked by it), with no action offered
    go(browser, By.CSS_SELECTOR, f'a.run[href="/console/runs/{prod}"]')
    assert browser.find_element(By.ID, "run-state").text == "waiting"
    assert browser.find_elements(By.ID, "actions") == []
    assert browser.find_elements(By.CSS_SELECTOR, "a.fork-from") == []


class Session:
    """A signed-in session of the console over plain HTTP."""

    def __init__(self, server: WebServer, actor: str, credential: str) -> None:
        self.client = httpx.Client(base_url=server.url, timeout=30)
        page = self.client.get("/inbox/signin").text
        self.client.post(
            "/inbox/signin",
            data={"csrf": _csrf(page), "actor_id": actor, "credential": credential},
        )

    def token(self, path: str) -> str:
        return _csrf(self.client.get(path).text)


def _csrf(page: str) -> str:
    found = re.search(r'name="csrf" value="([^"]+)"', page)
    assert found, page[:500]
    return found.group(1)


@pytest.fixture()
def session(web_server: WebServer) -> Iterator[Callable[[str, list[str]], Session]]:
    """Signed-in sessions of new actors (closed after the test)."""
    opened: list[Session] = []

    def open_one(actor: str, roles: list[str]) -> Session:
        opened.append(Session(web_server, actor, add_actor(actor, roles)))
        return opened[-1]

    yield open_one
    for one in opened:
        one.client.close()


def test_console_actions_need_the_csrf_token_the_operator_roles_and_a_readable_run(
    db: str, shared_worker: WorkerProcess, session: Callable[[str, list[str]], Session]
) -> None:
    # Given a waiting approval, its operator, its approver and someone with no role of it
    olga = session("olga", ["operator"])
    ann = session("ann", ["approver"])
    vic = session("vic", ["visitor"])
    run_id = enqueue_run("approval", {"env": "prod"})
    wait_pending(run_id)
    page = f"/console/runs/{run_id}"
    # Then the run is not found by whoever may not read it, as a missing id is not
    missing = vic.client.get("/console/runs/" + "f" * 32)
    hidden = vic.client.get(page)
    assert hidden.status_code == missing.status_code == 404
    assert "f" * 32 not in hidden.text and run_id in hidden.text
    assert vic.client.get("/console/runs").text.count('tr class="run"') == 0
    # And the approver reads it but is offered no action, and may not confirm one
    assert ann.client.get(page).status_code == 200
    assert 'id="actions"' not in ann.client.get(page).text
    assert ann.client.get(page + "/cancel").status_code == 403
    # When a cancel is posted without the session's token, by the approver, or by vic
    no_token = olga.client.post(page + "/cancel", data={"reason": "x"})
    by_ann = ann.client.post(page + "/cancel", data={"csrf": ann.token("/console/runs")})
    by_vic = vic.client.post(page + "/cancel", data={"csrf": vic.token("/console/runs")})
    # Then nothing changed; the refusals are on the run's record
    assert no_token.status_code == 403 and "CSRF" in no_token.text
    assert by_ann.status_code == 403 and by_vic.status_code == 404
    assert get_run(run_id).state == "waiting"
    refused = [
        (e.actor, e.detail["outcome"])
        for e in list_events(run_id)
        if e.trigger == "operator_refused"
    ]
    assert refused == [("human:ann", "denied"), ("human:vic", "denied")]
    # When the operator confirms a cancel from its page, with a reason
    confirm = olga.client.get(page + "/cancel")
    assert confirm.status_code == 200 and "Cancel run" in confirm.text
    done = olga.client.post(
        page + "/cancel", data={"csrf": _csrf(confirm.text), "reason": "wrong env"}
    )
    # Then it is cancelled, by her, for that reason
    assert done.status_code == 200, done.text
    assert wait_for(lambda: get_run(run_id).state == "cancelled")
    assert get_run(run_id).error == "wrong env"
    assert 'id="state-now">cancelled' in done.text
