"""Real services for the tests: PostgreSQL and SQLite databases, Redis, worker processes.

A missing service skips the tests that need it on a laptop, and fails them when ``CI`` is set.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest
import redis
from sqlalchemy import Engine, create_engine, func, select, text

from tests.forked import ForkedProcess, start_celery

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get(
    "INTERLUDE_TEST_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
# Set it to use an existing Redis (its databases 9 to 11); by default each test process starts
# a Redis of its own (``redis_base``).
REDIS_BASE_VARIABLE = "INTERLUDE_TEST_REDIS_BASE"
FLOW_MODULES = (
    "tests.flows.engine,tests.flows.interrupts,tests.flows.effects,tests.flows.expiry,"
    "tests.flows.expiry_policies,"
    "tests.flows.cli,tests.flows.effect_misuse,tests.flows.notifiers,tests.flows.agents,tests.flows.groups,tests.flows.history,"
    "tests.flows.linked,"
    "examples.procurement,"
    "examples.deploy_gate,"
    "examples.agent"
)
TABLES = (
    "events",
    "checkpoints",
    "effects",
    "resume_attempts",
    "kept_events",
    "answer_links",
    "notifications",
    # (Triggers empty it with the interrupts; emptied here too, so that a test that broke them
    # leaves no rows behind for the next.)
    "pending_interrupt_roles",
    "interrupts",
    "runs",
    "actor_contacts",
    "actors",
)


def unavailable(what: str, exc: BaseException) -> None:
    message = f"{what} is not available: {exc}"
    if os.environ.get("CI"):
        pytest.fail(message)
    pytest.skip(message)


def create_pg_database() -> tuple[str, Callable[[], None]]:
    name = f"interlude_test_{uuid.uuid4().hex[:10]}"
    try:
        admin = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    except Exception as exc:
        unavailable("PostgreSQL", exc)
    url = PG_ADMIN_URL.rsplit("/", 1)[0] + f"/{name}"

    def drop() -> None:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()

    return url, drop


_session_redis: Any = None


def redis_base() -> str:
    """``redis://host:port`` of the Redis this test process uses, started on first use.

    A server of the process's own (no persistence, stopped when the process exits), unless
    INTERLUDE_TEST_REDIS_BASE names one: parallel test processes, other checkouts' suites and
    benchmarks on the machine's shared Redis then never take each other's tasks.
    """
    global _session_redis
    given = os.environ.get(REDIS_BASE_VARIABLE)
    if given:
        return given.rstrip("/")
    if _session_redis is None:
        import atexit
        import tempfile

        from tests.acceptance.private_services import PrivateRedis

        directory = Path(tempfile.mkdtemp(prefix="interlude-test-redis-"))
        try:
            _session_redis = PrivateRedis(directory).start()
        except Exception as exc:
            unavailable("redis-server", exc)
        atexit.register(_session_redis.stop)
    return str(_session_redis.url()).rsplit("/", 1)[0]


def redis_client(db: int) -> redis.Redis:
    client = redis.Redis.from_url(f"{redis_base()}/{db}")
    try:
        client.ping()
    except Exception as exc:
        unavailable("Redis", exc)
    return client


class WorkerProcess:
    """A real ``celery -A worker worker`` (or ``beat``) subprocess with our environment."""

    def __init__(
        self,
        env: dict[str, str],
        log_dir: Path,
        *args: str,
        kind: str = "worker",
        task_events: bool = True,
    ) -> None:
        self.name = f"{kind}-{uuid.uuid4().hex[:6]}"
        # A worker sends task events from its start (``-E``) unless told not to: then only
        # Flower's request turns them on, as in a deployment that leaves them off. (It keeps
        # its heartbeats then: without them and gossip, Celery starts no event dispatcher at
        # all, and there is nothing for Flower to turn on.)
        self.task_events = task_events
        self.log_path = log_dir / f"{self.name}.log"
        self.env = env
        self.args = args
        self.kind = kind
        self.proc: ForkedProcess | subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> WorkerProcess:
        args: list[str] = []
        if self.kind == "worker":
            args += [
                "-n",
                f"{self.name}@%h",
                "--without-gossip",
                "--without-mingle",
            ]
            args += ["--without-heartbeat", "-E"] if self.task_events else []
        args += list(self.args)
        started_processes.append(self)
        self.proc = start_celery(
            self.kind, args, env=self.env, log_path=self.log_path, cwd=ROOT, timeout=timeout
        )
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def kill(self) -> None:
        """SIGKILL the whole process group: the main process and its pool children."""
        from worker.ops.processes import kill_process

        if self.proc is not None:
            kill_process(self.proc)

    def stop(self) -> None:
        from worker.ops.processes import stop_process

        if self.proc is not None:
            stop_process(self.proc)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")


class LogSource(Protocol):
    """A process of a test that logs to a file: its name and what it wrote."""

    name: str

    def output(self) -> str: ...


# The processes started by the running test (its fixtures included): a failure shows their logs
# (tests/worker_logs.py).
started_processes: list[LogSource] = []


def wait_for(predicate: Callable[[], Any], timeout: float = 30.0, interval: float = 0.1) -> Any:
    """Poll until ``predicate`` returns something truthy; fail with what it last returned.

    Most predicates read the database: polling faster only takes CPU from the processes
    under test (the suite runs on two cores)."""
    deadline = time.monotonic() + timeout
    value = None
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"condition not met within {timeout}s (last value: {value!r})")


@contextmanager
def publishing_to(url: str) -> Iterator[None]:
    """Point this process's Celery app (enqueue, resume, remote control) at ``url``."""
    from worker import app

    previous = app.conf.broker_url
    forget_connections()
    app.conf.broker_url = url
    try:
        yield
    finally:
        forget_connections()
        app.conf.broker_url = previous


def forget_connections() -> None:
    # The app keeps a connection pool and a producer pool built for the URL it had then;
    # Celery drops both the same way after a fork. They are not closed: kombu keeps them in a
    # registry per broker, and hands the same ones back when the app returns to that broker.
    from worker import app

    app._pool = None
    app.amqp._producer_pool = None


@contextmanager
def statements_sent(url: str) -> Iterator[list[str]]:
    """The first word of every statement this process sends to ``url`` within the block."""
    sent: list[str] = []

    def seen(sql: str, _params: Any) -> None:
        sent.append(sql.split(None, 1)[0].upper())

    with each_statement(url, seen):
        yield sent


@contextmanager
def each_statement(url: str, seen: Callable[[str, Any], None]) -> Iterator[None]:
    """``seen(sql, parameters)`` for every statement this process sends to ``url`` within the
    block (SQLAlchemy's ``before_cursor_execute``, which the driver's statements fire too)."""
    from sqlalchemy import event

    from models.db import get_engine

    def listener(_conn: object, _cursor: object, sql: str, params: Any, *_: object) -> None:
        seen(sql, params)

    engine = get_engine(url)
    event.listen(engine, "before_cursor_execute", listener)
    try:
        yield
    finally:
        event.remove(engine, "before_cursor_execute", listener)


@contextmanager
def broker_down() -> Iterator[list[str]]:
    """Every step publish of this process is refused meanwhile, as by a broker that is down;
    yields the runs whose publish was refused, in order."""
    from worker.engine import dispatch

    refused: list[str] = []

    def refuse(name: str, run_id: str, **_: Any) -> None:
        refused.append(run_id)
        raise ConnectionError("broker down")

    previous = dispatch.set_publisher(refuse)
    try:
        yield refused
    finally:
        dispatch.set_publisher(previous)


def enqueue_elsewhere(env: dict[str, str], count: int, sleep: float) -> list[str]:
    """Start ``count`` runs of ``effect_steady`` (each step sleeping ``sleep`` s) from another
    process, with ``env`` (a private broker's URL, say): their ids."""
    code = (
        "import json, sys\n"
        "from worker import enqueue_run\n"
        "n, sleep = int(sys.argv[1]), float(sys.argv[2])\n"
        "print(json.dumps([enqueue_run('effect_steady', {'sleep': sleep}) for _ in range(n)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(count), str(sleep)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    run_ids: list[str] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return run_ids


def runs_in_state(engine: Engine, run_ids: list[str], state: str) -> int:
    """How many of ``run_ids`` are in ``state``."""
    from models.tables import Run

    with engine.connect() as conn:
        return int(
            conn.execute(
                select(func.count()).select_from(Run).where(Run.id.in_(run_ids), Run.state == state)
            ).scalar_one()
        )
