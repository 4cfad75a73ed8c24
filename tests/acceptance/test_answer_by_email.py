"""Answered from e-mail, end to end: a real worker e-mails the responder (a real SMTP server
in this process, aiosmtpd), the test reads the message, opens the link in a real headless
Chromium served by a real ``interlude serve``, confirms, and the run continues."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from tests.acceptance.browser import new_browser  # noqa: F401  (a fixture)
from tests.conftest import worker_env
from tests.mailbox import links_in, smtp_server
from tests.resumes import wait_finished, wait_pending
from tests.services import WorkerProcess
from tests.webserver import WebServer
from worker import add_actor, enqueue_run, get_run, list_resume_attempts
from worker.ops.contacts import add_contact

SECRET = "acceptance-link-secret-" + "x" * 20
UNTHROTTLED = {
    "INTERLUDE_WEB_CLIENT_LIMIT": "10000/minute",
    "INTERLUDE_WEB_ACTOR_LIMIT": "10000/minute",
}


def test_a_responder_answers_from_the_email_in_the_browser_and_the_run_continues(
    db: str,
    database_url: str,
    logs_dir: Path,
    start_worker: Callable[..., WorkerProcess],
    new_browser: Callable[[], WebDriver],  # noqa: F811
) -> None:
    # Given alice, an approver reached by e-mail
    add_actor("alice", ["approver"])
    add_contact("alice", "email", "alice@example.org")
    with smtp_server() as mail:
        # And a web server and a worker that e-mails links to it
        server = WebServer(
            worker_env(database_url, INTERLUDE_LINK_SECRET=SECRET, **UNTHROTTLED), logs_dir
        )
        start_worker(
            "-c",
            "2",
            INTERLUDE_LINK_SECRET=SECRET,
            INTERLUDE_SMTP_HOST="127.0.0.1",
            INTERLUDE_SMTP_PORT=str(mail.port),
            INTERLUDE_SMTP_SECURITY="none",
            INTERLUDE_SMTP_FROM="approvals@example.org",
            INTERLUDE_WEB_BASE_URL=server.url,
        )
        server.start()
        try:
            # When a run asks for her approval
            run_id = enqueue_run("linked", {"vendor": "umbrella", "amount": 777})
            wait_pending(run_id)
            # Then one message arrives for her, with her links
            (message,) = mail.wait_for(1)
            assert message["To"] == "alice@example.org"
            approve = links_in(message)["Approve"]
            assert approve.startswith(f"{server.url}/inbox/a/ila_")
            # When she opens the approve link: the evidence, and nothing decided yet
            browser = new_browser()
            browser.get(approve)
            assert "umbrella" in browser.find_element(By.ID, "evidence").text
            assert browser.find_element(By.ID, "answer-as").text == "alice"
            assert get_run(run_id).state == "waiting"
            assert list_resume_attempts(run_id=run_id) == []
            # And confirms
            browser.find_element(By.ID, "approve").click()
            outcome = browser.find_element(By.ID, "outcome").text
            assert outcome.startswith("Accepted"), browser.find_element(By.ID, "reason").text
            # Then the run continues to its end with her answer, recorded as given by link
            assert wait_finished(run_id) == "succeeded"
            state = get_run(run_id).flow_state
            assert (state["decision"], state["by"], state["done"]) == ("approved", "alice", True)
            (attempt,) = list_resume_attempts(run_id=run_id)
            assert attempt.via is not None and attempt.via.startswith("link:")
            # And the link, opened again, says it was used and offers no button
            browser.get(approve)
            assert "used already" in browser.find_element(By.ID, "problem").text
            assert browser.find_elements(By.ID, "approve") == []
            # And the token is nowhere in the server's log
            assert approve.rsplit("/", 1)[1] not in server.output()
            assert "/inbox/a/ila_[redacted]" in server.output()
        finally:
            server.stop()
