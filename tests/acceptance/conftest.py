"""Acceptance tests run real processes (``celery worker`` / ``beat``, ``interlude serve``):
all of them are marked ``slow``. Fixtures for the suites that need an ``interlude serve``, and
the broker each broker-sensitive test runs on (``brokers.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.acceptance.brokers import BROKERS, rabbit_for
from tests.acceptance.private_services import PrivateRabbit
from tests.conftest import worker_env
from tests.services import publishing_to
from tests.webserver import WebServer

HERE = Path(__file__).resolve().parent
# High enough that only the rate-limit tests, with their own servers, ever reach a limit.
UNTHROTTLED = {
    "INTERLUDE_WEB_CLIENT_LIMIT": "10000/minute",
    "INTERLUDE_WEB_ACTOR_LIMIT": "10000/minute",
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # Every test of this directory, including ones added later, is out of the quick loop.
    for item in items:
        if HERE in item.path.parents:
            item.add_marker(pytest.mark.slow)
        # In parallel runs (make test), the RabbitMQ variants go to one process, which starts
        # the session's RabbitMQ node once rather than once per process. tryfirst: xdist
        # reads the group marks in a hook of its own, and ignores marks added after it.
        params = getattr(item, "callspec", None)
        if params is not None and "rabbitmq" in params.params.values():
            item.add_marker(pytest.mark.xdist_group("rabbitmq"))


@pytest.fixture(autouse=True)
def _empty_broker(request: pytest.FixtureRequest) -> None:
    """Tests with a database also use the broker: start each with empty queues."""
    if "db" in request.fixturenames:
        request.getfixturevalue("broker")


@pytest.fixture(scope="session")
def web_server(database_url: str, logs_dir: Path) -> Iterator[WebServer]:
    """One ``interlude serve`` per backend, on the test database and broker."""
    server = WebServer(worker_env(database_url, **UNTHROTTLED), logs_dir).start()
    yield server
    server.stop()


@pytest.fixture()
def start_web_server(database_url: str, logs_dir: Path) -> Iterator[Callable[..., WebServer]]:
    """Start an ``interlude serve`` with its own settings for one test."""
    started: list[WebServer] = []

    def start(**env: str) -> WebServer:
        server = WebServer(worker_env(database_url, **env), logs_dir).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


@pytest.fixture(scope="session")
def rabbit_node() -> Iterator[PrivateRabbit]:
    node = PrivateRabbit().start()
    yield node
    node.remove()


# Modules whose every test with a database runs once per broker (test_outages stops its
# brokers, and has its own fixture for that).
BROKER_SENSITIVE = {"tests.acceptance.test_effect_crashes", "tests.acceptance.test_worker_release"}


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.module.__name__ in BROKER_SENSITIVE and "db" in metafunc.fixturenames:
        # Named in the test's signature: a fixture only added here would be parametrized but
        # never set up, and every variant would quietly run on Redis.
        if "broker_url" not in metafunc.definition.fixturenames:
            raise pytest.UsageError(f"{metafunc.definition.nodeid} must take broker_url")
        metafunc.parametrize("broker_url", BROKERS, indirect=True)


@pytest.fixture()
def broker_url(
    request: pytest.FixtureRequest, broker: str, monkeypatch: pytest.MonkeyPatch
) -> Iterator[str]:
    """The broker this test's processes use: the session's Redis (emptied by ``broker``), or
    the private RabbitMQ node with empty queues. Workers started by the test inherit it
    (INTERLUDE_BROKER_URL), and this process publishes to it."""
    if getattr(request, "param", "redis") == "redis":
        yield request.getfixturevalue("own_broker")
        return
    node = rabbit_for(request)
    monkeypatch.setenv("INTERLUDE_BROKER_URL", node.url())
    with publishing_to(node.url()):
        yield node.url()
