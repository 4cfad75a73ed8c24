"""The tutorial's code, executed as written (docs/tutorial/index.md), on both backends.

Its flow is ``examples.refunds``; the reader's own test runs under pytest in a process of its
own, as the reader runs it; the application scripts run here, their tasks drained in-process
through the dispatch seam where the tutorial has a worker running.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import runpy
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from examples import payments
from worker import add_actor, get_run
from worker.testing import TaskRecorder

TUTORIAL = Path(__file__).resolve().parents[2] / "docs" / "tutorial"
# Every snippet file of the tutorial and the test that executes it (tests/unit/test_docs.py
# checks that this covers the folder).
EXECUTED = {
    "test_refunds.py": "test_the_readers_test_passes",
    "start_refund.py": "test_the_application_starts_and_approves_a_refund",
    "approve_refund.py": "test_the_application_starts_and_approves_a_refund",
    "answer.sh": "tests/acceptance/test_tutorial.py",
}


@pytest.fixture(autouse=True)
def refund_flow(db: str) -> Iterator[None]:
    """The tutorial's flow registered (as INTERLUDE_FLOWS=examples.refunds does), and the
    payment provider's table gone after each test."""
    importlib.import_module("examples.refunds")
    yield
    payments.drop_table()


def run_script(name: str, *args: str) -> str:
    """Run one of the tutorial's scripts as ``python docs/tutorial/NAME ARGS``; its output."""
    printed = io.StringIO()
    argv = sys.argv
    sys.argv = [str(TUTORIAL / name), *args]
    try:
        with contextlib.redirect_stdout(printed):
            runpy.run_path(str(TUTORIAL / name), run_name="__main__")
    finally:
        sys.argv = argv
    return printed.getvalue()


def test_the_readers_test_passes(database_url: str) -> None:
    # Given the database the tutorial's test is pointed at, and the flow's module
    env = {
        **os.environ,
        "INTERLUDE_DATABASE_URL": database_url,
        "INTERLUDE_FLOWS": "examples.refunds",
    }
    # When the reader runs it with pytest
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_refunds.py"],
        cwd=TUTORIAL,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=240,
    )
    # Then it passes
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout


def test_the_application_starts_and_approves_a_refund(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a run started by the application script, and run by "the worker" until it waits
    run_id = run_script("start_refund.py").strip()
    assert run_script("start_refund.py").strip() == run_id  # its idempotency key: one run
    tasks.drain()
    assert get_run(run_id).state == "waiting"

    # When ada of finance approves it with her credential
    monkeypatch.setenv("INTERLUDE_ACTOR_TOKEN", add_actor("ada", ["finance"]))
    printed = run_script("approve_refund.py", run_id).splitlines()
    tasks.drain()

    # Then the answer is accepted, the run succeeds, and the customer is refunded once
    assert printed == ["refunds need a second pair of eyes: {'amount': 42.5}", "accepted"]
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output["outcome"] == "refunded"
    assert [refund["amount"] for refund in payments.refunds_for("C-17")] == [42.5]
