"""A failed test's report shows the end of the log of every worker, beat and Flower it ran with.

Worker processes log to files in the session's temporary directory, which later runs rotate
away; a failure seen only in a full parallel run (and in CI) is explained by these lines or
by nothing.
"""

from __future__ import annotations

from collections.abc import Generator

import pytest

from tests.services import WorkerProcess, started_processes

TAIL_LINES = 80


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    started_processes.clear()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, None]:
    outcome = yield
    report: pytest.TestReport = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed or call.when == "teardown":
        return
    funcargs = getattr(item, "funcargs", {})
    used = [p for p in funcargs.values() if isinstance(p, WorkerProcess)]
    for process in dict.fromkeys([*used, *started_processes]):
        try:
            lines = process.output().splitlines()[-TAIL_LINES:]
        except OSError as exc:
            lines = [f"(no log: {exc})"]
        report.sections.append((f"log of {process.name} (last lines)", "\n".join(lines)))
