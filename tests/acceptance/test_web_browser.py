"""A real headless Chromium answers an interrupt in the web inbox of ``interlude serve``.

Needs Debian's ``chromium`` and ``chromium-driver`` (``.ci/run`` installs them when missing);
without them the test is skipped with the reason, except under ``CI``, where it fails.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver
from selenium.webdriver.support.ui import Select

from examples import procurement
from tests.acceptance.browser import new_browser  # noqa: F401  (a fixture)
from tests.resumes import wait_finished, wait_pending
from tests.services import ROOT, WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run

# The README's picture; rewritten only on request so that a test run leaves the tree clean.
README_SCREENSHOT = ROOT / "docs" / "inbox-interrupt.png"
UPDATE_DOCS = os.environ.get("INTERLUDE_UPDATE_DOCS") == "1"
ITEMS = [{"sku": "VLV-200", "description": "gate valve DN200", "quantity": 4, "unit_price": 310.0}]


def sign_in(browser: WebDriver, server: WebServer, actor: str, credential: str) -> None:
    browser.get(server.url + "/inbox")
    browser.find_element(By.ID, "actor_id").send_keys(actor)
    browser.find_element(By.ID, "credential").send_keys(credential)
    browser.find_element(By.ID, "signin").click()
    assert browser.find_element(By.ID, "signed-in-as").text.startswith(actor)


def fill_certificate(browser: WebDriver, certificate_id: str) -> None:
    browser.find_element(By.ID, "input.certificate_id").send_keys(certificate_id)
    browser.find_element(By.ID, "input.engineer").send_keys("Ada Lovelace")
    Select(browser.find_element(By.ID, "input.conclusion")).select_by_value("fit_for_purpose")
    browser.find_element(By.ID, "input.notes").send_keys("rated PN16, as specified")


def test_a_person_answers_in_the_browser_and_a_second_session_sees_stale(
    db: str,
    shared_worker: WorkerProcess,
    web_server: WebServer,
    new_browser: Callable[[], WebDriver],  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given a purchase request waiting for an engineer's certificate
    credential = add_actor("ada", ["engineer"])
    request_id = f"PR-{uuid.uuid4().hex[:6]}"
    procurement.submit_request(request_id, "acme-valves", ITEMS)
    run_id = enqueue_run("procurement", {"request_id": request_id})
    interrupt = wait_pending(run_id)
    # And two browser sessions of ada's, both with the interrupt page open
    first, second = new_browser(), new_browser()
    for browser in (first, second):
        sign_in(browser, web_server, "ada", credential)
        browser.find_element(By.CSS_SELECTOR, f'a[href="/inbox/interrupts/{interrupt.id}"]').click()
        assert request_id in browser.find_element(By.ID, "evidence").text
    # When she fills in the generated form and approves in the first
    fill_certificate(first, "EC-7781")
    assert first.find_element(By.ID, "kind").text == "evidence"
    screenshot = README_SCREENSHOT if UPDATE_DOCS else tmp_path / "inbox-interrupt.png"
    assert first.save_screenshot(str(screenshot))
    first.find_element(By.ID, "approve").click()
    # Then she reads "accepted", and the run finishes with her certificate
    outcome = first.find_element(By.ID, "outcome").text
    assert outcome.startswith("Accepted"), (outcome, first.find_element(By.ID, "reason").text)
    assert "The run is now" in first.find_element(By.ID, "run-state").text
    assert wait_finished(run_id) == "succeeded"
    state = get_run(run_id).flow_state
    assert state["certificate"]["certificate_id"] == "EC-7781"
    assert state["certified_by"] == "ada"
    # And the second session, answering the same interrupt, reads that it is stale
    fill_certificate(second, "EC-7782")
    second.find_element(By.ID, "approve").click()
    outcome = second.find_element(By.ID, "outcome").text
    assert outcome.startswith("Stale"), outcome
    assert "The interrupt is resolved" in second.find_element(By.TAG_NAME, "main").text
    assert screenshot.stat().st_size > 10_000
