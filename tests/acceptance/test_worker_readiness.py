"""A worker whose database is away or behind says so, takes no task, and fails the compose
healthcheck until the database is ready; then it starts by itself (real processes)."""

from __future__ import annotations

import os
import shlex
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from models.db import dispose_engines
from models.migrate import history, upgrade
from models.settings import reset_settings
from tests.acceptance.private_services import PrivatePostgres
from tests.conftest import OWN_BROKER_DB, REDIS_URL
from tests.services import (
    ROOT,
    create_pg_database,
    publishing_to,
    redis_client,
    started_processes,
    wait_for,
)
from worker import enqueue_run, get_run

READY = " ready."


class StartingWorker:
    """``celery -A worker worker`` started without waiting for its ready line."""

    def __init__(self, env: dict[str, str], log_dir: Path, cwd: Path = ROOT) -> None:
        self.name = f"readiness-{uuid.uuid4().hex[:6]}"
        self.node = f"{self.name}@{socket.gethostname()}"
        self.log_path = log_dir / f"{self.name}.log"
        self.env = env
        started_processes.append(self)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                [
                    *(sys.executable, "-m", "celery", "-A", "worker", "worker", "-l", "info"),
                    *("-n", self.node, "-c", "1", "--without-gossip", "--without-mingle"),
                ],
                cwd=cwd,
                env=env,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def healthy(self) -> bool:
        """The compose file's healthcheck of the worker service, run against this worker."""
        compose = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
        test = compose["services"]["worker"]["healthcheck"]["test"]
        assert test[0] == "CMD-SHELL"
        command = test[1].replace("celery@$$HOSTNAME", self.node).replace("$$", "$")
        command = command.replace("--timeout 10", "--timeout 3")
        argv = shlex.split(command)
        assert argv[:1] == ["celery"]
        done = subprocess.run(
            [sys.executable, "-m", *argv], cwd=ROOT, env=self.env, capture_output=True, timeout=60
        )
        return done.returncode == 0

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(15)


@pytest.fixture()
def own_broker(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """An empty broker for this test's worker, which this process publishes to (the tests
    bring their own databases: they need none of the session's)."""
    url = f"{REDIS_URL}/{OWN_BROKER_DB}"
    redis_client(OWN_BROKER_DB).flushdb()
    # Entered first: it imports the Celery app, which must be made with the session's broker
    # (its URL is read once), or every later test of this process would publish here.
    with publishing_to(url):
        monkeypatch.setenv("INTERLUDE_BROKER_URL", url)
        yield url


@pytest.fixture()
def on_database(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This process talks to the database the test sets in INTERLUDE_DATABASE_URL."""
    yield
    dispose_engines()
    reset_settings()


def _use(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", url)
    reset_settings()
    dispose_engines()


def _waiting_lines(worker: StartingWorker) -> list[str]:
    return [line for line in worker.output().splitlines() if "not taking tasks:" in line]


def test_a_worker_waits_for_an_unreachable_database_and_starts_when_it_is_up(
    own_broker: str, logs_dir: Path, monkeypatch: pytest.MonkeyPatch, on_database: None
) -> None:
    # Given a PostgreSQL that is not running yet
    server = PrivatePostgres().init()
    worker: StartingWorker | None = None
    try:
        # When a worker starts against it
        env = dict(os.environ, INTERLUDE_DATABASE_URL=server.url)
        worker = StartingWorker(env, logs_dir)
        # Then it says on one line that it cannot reach the database, and does not say ready
        line = wait_for(lambda: _waiting_lines(worker), timeout=60)[0]
        assert "cannot reach the database" in line and "checking again in" in line
        assert "postgres@127.0.0.1" in line  # which database, without a password
        assert READY not in worker.output() and "Traceback" not in worker.output()
        assert worker.proc.poll() is None  # it waits; it does not exit
        # ... and the compose healthcheck finds it unhealthy
        assert not worker.healthy()
        # When the database comes up with the schema
        server.start()
        upgrade(server.url)
        # Then the worker says so, becomes ready and healthy, and runs steps
        wait_for(lambda: READY in worker.output(), timeout=60)
        assert "database ready" in worker.output()
        assert worker.healthy()
        _use(server.url, monkeypatch)
        run_id = enqueue_run("three_steps", {})
        wait_for(lambda: get_run(run_id).state == "succeeded", timeout=60)
    finally:
        if worker is not None:
            worker.stop()
        server.remove()


def test_a_worker_waits_for_a_schema_behind_its_code_and_starts_after_the_upgrade(
    own_broker: str, logs_dir: Path, monkeypatch: pytest.MonkeyPatch, on_database: None
) -> None:
    # Given a database at the first revision of the schema (a deploy whose migration has not
    # run yet)
    url, drop = create_pg_database()
    worker: StartingWorker | None = None
    try:
        first = history()[-1].id
        upgrade(url, first)
        # When a worker starts against it
        worker = StartingWorker(dict(os.environ, INTERLUDE_DATABASE_URL=url), logs_dir)
        # Then it says the schema is behind and what to do, and takes no task
        line = wait_for(lambda: _waiting_lines(worker), timeout=60)[0]
        assert f"the database schema is at revision {first}, older than" in line
        assert "run `interlude db upgrade`" in line
        assert READY not in worker.output()
        # When the schema is upgraded, Then the worker starts and runs steps
        upgrade(url)
        wait_for(lambda: READY in worker.output(), timeout=60)
        _use(url, monkeypatch)
        run_id = enqueue_run("three_steps", {})
        wait_for(lambda: get_run(run_id).state == "succeeded", timeout=60)
    finally:
        if worker is not None:
            worker.stop()
        dispose_engines()
        drop()


def test_a_worker_without_a_database_url_names_the_embedded_database_it_waits_for(
    own_broker: str, logs_dir: Path, tmp_path: Path
) -> None:
    # Given a worker started where no embedded database was made, INTERLUDE_DATABASE_URL unset
    env = {k: v for k, v in os.environ.items() if k != "INTERLUDE_DATABASE_URL"}
    env["PYTHONPATH"] = str(ROOT)  # the test flows' package
    worker = StartingWorker(env, logs_dir, cwd=tmp_path)
    try:
        # Then it says that it uses the embedded default, where, and that it is not there
        line = wait_for(lambda: _waiting_lines(worker), timeout=60)[0]
        database = tmp_path / ".interlude" / "interlude.db"
        assert f"no database file at {database}: run `interlude db upgrade`" in line
        assert (
            f"INTERLUDE_DATABASE_URL is not set: using the embedded SQLite database at {database}"
            in line
        )
        assert READY not in worker.output()
    finally:
        worker.stop()
