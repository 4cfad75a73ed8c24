"""The longest tests first, so that a parallel run (``make test``) does not end on one of them.

``tests/durations.json`` holds the seconds each test took (setup, call and teardown) in a
recent run; ``pytest --record-durations`` updates it with the durations of the tests it ran.
Tests are then ordered longest first, in three phases so that each test process changes
database backend once: the PostgreSQL variants with the long tests that need no database,
then the SQLite variants, then the rest. pytest-xdist hands tests out in this order
(``--dist loadgroup``; a group, such as the RabbitMQ variants, goes out first as one unit).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

import pytest

DURATIONS = Path(__file__).resolve().parent / "durations.json"
# What a test not in the file is expected to take: acceptance tests start processes.
UNKNOWN_ACCEPTANCE = 10.0
UNKNOWN = 0.0
# A test without a database that takes this long goes with the first phase.
LONG = 5.0


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-durations",
        action="store_true",
        help=f"write each test's duration to {DURATIONS.name} (the order of later runs)",
    )


def _known() -> dict[str, float]:
    try:
        known: dict[str, float] = json.loads(DURATIONS.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return {}
    return known


def _key(nodeid: str) -> str:
    """The test's id without the ``@group`` that xdist appends to grouped tests."""
    return nodeid.rsplit("@", 1)[0] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def _expected(item: pytest.Item, known: dict[str, float]) -> float:
    if _key(item.nodeid) in known:
        return known[_key(item.nodeid)]
    return UNKNOWN_ACCEPTANCE if "/acceptance/" in item.nodeid else UNKNOWN


def _phase(item: pytest.Item, seconds: float) -> int:
    params = getattr(item, "callspec", None)
    backend = params.params.get("database_url") if params is not None else None
    if backend == "postgresql" or (backend is None and seconds >= LONG):
        return 0
    return 1 if backend == "sqlite" else 2


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # trylast: after pytest grouped the items by their session-scoped parameters.
    known = _known()
    expected = {item.nodeid: _expected(item, known) for item in items}
    items.sort(key=lambda item: (_phase(item, expected[item.nodeid]), -expected[item.nodeid]))


class _Recorder:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[_key(report.nodeid)] += report.duration

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if hasattr(session.config, "workerinput"):
            return  # an xdist worker: the controller sees every report and writes the file
        # Merged into what the file had: a run of a few tests keeps the others' durations.
        merged = {**_known(), **{nodeid: round(s, 2) for nodeid, s in self.seconds.items()}}
        DURATIONS.write_text(json.dumps(dict(sorted(merged.items())), indent=0) + "\n")


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("record_durations"):
        config.pluginmanager.register(_Recorder(), "interlude-record-durations")
