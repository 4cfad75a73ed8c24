"""A reviewer approves, edits or rejects an agent's proposed tool call in a real headless
Chromium, on the inbox of a real ``interlude serve``, with a real worker running the steps."""

from __future__ import annotations

from collections.abc import Callable

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.acceptance.test_web_browser import new_browser, sign_in
from tests.flows import agents
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run, list_resume_attempts

__all__ = ["new_browser"]  # the fixture, used by name


def _open(browser: WebDriver, server: WebServer, interrupt_id: str) -> None:
    browser.get(f"{server.url}/inbox/interrupts/{interrupt_id}")
    assert browser.find_element(By.ID, "call-tool").text == "refund"


def _outcome(browser: WebDriver) -> str:
    text: str = browser.find_element(By.ID, "outcome").text
    return text


def test_approve_as_proposed_and_reject_with_a_message(
    db: str,
    shared_worker: WorkerProcess,
    web_server: WebServer,
    new_browser: Callable[[], WebDriver],
) -> None:
    credential = add_actor("mia", ["manager"])
    approved = enqueue_run("agent_review", {"amount": 300})
    rejected = enqueue_run("agent_review", {"amount": 400})
    asked = {run_id: wait_pending(run_id, "refund") for run_id in (approved, rejected)}
    browser = new_browser()
    sign_in(browser, web_server, "mia", credential)

    # The page shows the call: the tool, each argument, and the context beside it
    _open(browser, web_server, asked[approved].id)
    assert browser.find_element(By.ID, "arg-order").text == "B-7"
    assert browser.find_element(By.ID, "arg-amount").text == "300"
    assert '"customer": "c-9"' in browser.find_element(By.ID, "evidence").text
    # When she approves it as proposed, it runs as proposed
    browser.find_element(By.ID, "approve").click()
    assert _outcome(browser).startswith("Accepted"), browser.find_element(By.ID, "reason").text
    assert wait_finished(approved) == "succeeded"
    assert agents.executed(approved) == [{"order": "B-7", "amount": 300}]

    # When she rejects the other with a message, nothing runs and the step hears why
    _open(browser, web_server, asked[rejected].id)
    browser.find_element(By.ID, "message").send_keys("the order was never delivered")
    browser.find_element(By.ID, "reject").click()
    assert _outcome(browser).startswith("Accepted")
    assert wait_finished(rejected) == "succeeded"
    assert agents.executed(rejected) == []
    assert get_run(rejected).output["told_model"] == "the order was never delivered"


def test_an_edit_beyond_authority_is_denied_and_one_within_runs_as_edited(
    db: str,
    shared_worker: WorkerProcess,
    web_server: WebServer,
    new_browser: Callable[[], WebDriver],
) -> None:
    credential = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    asked = wait_pending(run_id, "refund")
    browser = new_browser()
    sign_in(browser, web_server, "mia", credential)
    _open(browser, web_server, asked.id)
    # The edit form is generated from the arguments' schema, prefilled with the proposal
    amount = browser.find_element(By.ID, "args.amount")
    assert amount.get_attribute("value") == "300" and amount.get_attribute("type") == "number"
    assert browser.find_element(By.ID, "args.order").get_attribute("value") == "B-7"

    # When she raises the refund beyond a manager's authority
    amount.clear()
    amount.send_keys("5000")
    browser.find_element(By.ID, "approve-edited").click()
    # Then she reads that it is denied and why; the attempt is recorded; nothing ran
    assert _outcome(browser) == "Denied: you may not approve the call as edited."
    assert "finance-lead" in browser.find_element(By.ID, "reason").text
    [attempt] = list_resume_attempts(interrupt_id=asked.id)
    assert attempt.outcome == "denied"
    assert attempt.payload["input"] == {"args": {"order": "B-7", "amount": 5000}}
    assert get_run(run_id).state == "waiting" and agents.executed(run_id) == []

    # When she goes back to the call and lowers the refund instead
    browser.find_element(By.ID, "back").click()
    amount = browser.find_element(By.ID, "args.amount")
    amount.clear()
    amount.send_keys("250")
    browser.find_element(By.ID, "approve-edited").click()
    # Then the edited call is what runs
    assert _outcome(browser).startswith("Accepted"), browser.find_element(By.ID, "reason").text
    assert wait_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 250}]
    assert get_run(run_id).output["edited"] is True
