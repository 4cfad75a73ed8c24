"""Fixtures shared by every suite. The integration suites run once per database backend."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.services import (
    FLOW_MODULES,
    TABLES,
    WorkerProcess,
    create_pg_database,
    publishing_to,
    redis_base,
    redis_client,
)

# The broker is fixed before the Celery app is imported. Three Redis databases (of this
# process's own Redis, unless INTERLUDE_TEST_REDIS_BASE names one): the session's broker, the
# test flows' outside world, and the broker of tests that start worker processes of their own.
REDIS_URL = redis_base()
REDIS_DB = int(os.environ.get("INTERLUDE_TEST_REDIS_DB", "9"))
OWN_BROKER_DB = REDIS_DB + 2
os.environ["INTERLUDE_BROKER_URL"] = f"{REDIS_URL}/{REDIS_DB}"
os.environ["INTERLUDE_TEST_REDIS"] = f"{REDIS_URL}/{REDIS_DB + 1}"
os.environ["INTERLUDE_FLOWS"] = FLOW_MODULES
os.environ.setdefault("INTERLUDE_LEASE_SECONDS", "30")
# Tests that are not about zombie workers need not wait long for a stale owner's call.
os.environ.setdefault("INTERLUDE_EFFECT_GRACE", "1")
# A failing notifier is tried again within a second or so, not a minute (2, 4, ... 32 s).
os.environ.setdefault("INTERLUDE_NOTIFY_BACKOFF", "0.01")

from models.db import dispose_engines, get_engine  # noqa: E402
from models.migrate import upgrade  # noqa: E402
from models.settings import reset_settings  # noqa: E402
from worker.testing import TaskRecorder, recording  # noqa: E402

BACKENDS = ["sqlite", "postgresql"]
# The longest tests first (tests/durations.json), and ``--record-durations``; a failed test
# shows the logs of the workers it ran with.
pytest_plugins = ["tests.ordering", "tests.worker_logs"]


@pytest.fixture(scope="session", params=BACKENDS)
def database_url(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A migrated database of each backend, used by every integration test of the session."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('sqlite') / 'interlude.db'}"
        drop: Callable[[], None] = lambda: None  # noqa: E731
    else:
        url, drop = create_pg_database()
    upgrade(url)
    previous = os.environ.get("INTERLUDE_DATABASE_URL")
    os.environ["INTERLUDE_DATABASE_URL"] = url
    reset_settings()
    dispose_engines()
    yield url
    dispose_engines()
    if previous is None:
        os.environ.pop("INTERLUDE_DATABASE_URL", None)
    else:
        os.environ["INTERLUDE_DATABASE_URL"] = previous
    reset_settings()
    drop()


@pytest.fixture()
def db(database_url: str) -> Iterator[str]:
    """An empty database (all rows deleted) for this test; Redis is left alone."""
    _clean(database_url)
    yield database_url


@pytest.fixture()
def tasks(db: str) -> Iterator[TaskRecorder]:
    """The dispatch seam: this test's publishes are recorded; ``tasks.drain()`` executes them.

    Steps and resumes then run in the test process, through the worker's own code, against
    the real database; no broker and no worker process is involved.
    """
    with recording() as recorder:
        yield recorder


@pytest.fixture()
def defining(tasks: TaskRecorder) -> Iterator[TaskRecorder]:
    """``tasks``, with the suite's flows loaded; the flows this test defines are forgotten
    after it."""
    from tests.scratch_flows import scratch_registry
    from worker.flows.flow import load_flow_modules

    load_flow_modules()
    with scratch_registry():
        yield tasks


@pytest.fixture()
def scratch() -> None:
    """An empty Redis database for the test flows' "outside world" (``INTERLUDE_TEST_REDIS``)."""
    redis_client(REDIS_DB + 1).flushdb()


@pytest.fixture()
def broker(db: str) -> Iterator[str]:
    """Empty broker queues (and outside world) for a test with real worker processes."""
    redis_client(REDIS_DB).flushdb()
    redis_client(REDIS_DB + 1).flushdb()
    yield db


def _clean(url: str) -> None:
    engine = get_engine(url)
    with engine.begin() as conn:
        for table in TABLES:
            conn.exec_driver_sql(f"DELETE FROM {table}")


@pytest.fixture()
def backend(database_url: str) -> str:
    return "postgresql" if database_url.startswith("postgresql") else "sqlite"


def worker_env(database_url: str, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env["INTERLUDE_DATABASE_URL"] = database_url
    env.update(extra)
    return env


@pytest.fixture(scope="session")
def logs_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def shared_worker(database_url: str, logs_dir: Path) -> Iterator[WorkerProcess]:
    """One real worker per backend (concurrency 2) for tests that only need one running."""
    worker = WorkerProcess(worker_env(database_url), logs_dir, "-c", "2").start()
    yield worker
    worker.stop()


@pytest.fixture()
def own_broker(broker: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty broker that only this test's own processes use, and this process publishes to.

    The session's shared worker consumes the session's broker: it would take the tasks of a
    test that starts workers with settings of their own (short leases, crash points), and run
    them with its own.
    """
    url = f"{REDIS_URL}/{OWN_BROKER_DB}"
    redis_client(OWN_BROKER_DB).flushdb()
    monkeypatch.setenv("INTERLUDE_BROKER_URL", url)
    with publishing_to(url):
        yield url


@pytest.fixture()
def start_worker(
    database_url: str, logs_dir: Path, request: pytest.FixtureRequest
) -> Iterator[Callable[..., WorkerProcess]]:
    """Start extra workers (or beat) for one test; all are stopped when it ends.

    They use a broker of the test's own (``own_broker``), unless the test works with the
    session's shared worker or chose its broker (``broker_url``).
    """
    if not {"shared_worker", "broker_url"} & set(request.fixturenames):
        request.getfixturevalue("own_broker")
    started: list[WorkerProcess] = []

    def start(
        *args: str, kind: str = "worker", task_events: bool = True, **env: str
    ) -> WorkerProcess:
        process = WorkerProcess(
            worker_env(database_url, **env), logs_dir, *args, kind=kind, task_events=task_events
        )
        started.append(process.start())
        return process

    yield start
    # Killed, not stopped: the test is over, and a warm shutdown (waiting for the pool to
    # finish and exit) only costs time. The next test starts with empty queues and tables.
    for process in started:
        process.kill()
