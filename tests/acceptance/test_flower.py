"""Flower, as an operator runs it, sees interlude's worker, tasks and queues (real processes)."""

from __future__ import annotations

import base64
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.services import ROOT, WorkerProcess, started_processes, wait_for
from worker import enqueue_run, get_run
from worker.engine.tasknames import QUEUE_MAINTENANCE, QUEUE_RESUMES, QUEUE_STEPS, TASK_STEP

DEPLOY = {"service": "billing", "environment": "staging", "version": "3.1.0", "diff": "+ x = 1\n"}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


# The login this test's Flowers are started with (FLOWER_BASIC_AUTH).
LOGIN = "ops:flower-test-password"


class Flower:
    """A real ``celery -A worker flower`` subprocess, with a login this test holds."""

    def __init__(
        self,
        database_url: str,
        log_path: Path,
        broker_url: str | None = None,
        *,
        login: str | None = LOGIN,
        address: str | None = "127.0.0.1",
    ) -> None:
        self.port = free_port()
        env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
        env["INTERLUDE_DATABASE_URL"] = database_url
        if login is not None:
            env["FLOWER_BASIC_AUTH"] = login
        if broker_url is not None:
            env["INTERLUDE_BROKER_URL"] = broker_url
        self.login = login
        self.name = f"flower-{self.port}"
        self.log_path = log_path
        self.log = log_path.open("wb")
        started_processes.append(self)
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "worker",
                "flower",
                *([f"--address={address}"] if address is not None else []),
                f"--port={self.port}",
            ],
            cwd=ROOT,
            env=env,
            stdout=self.log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")

    def get(self, path: str, *, signed_in: bool = True) -> Any:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}")
        if signed_in and self.login is not None:
            token = base64.b64encode(self.login.encode()).decode()
            request.add_header("Authorization", f"Basic {token}")
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                body = response.read().decode()
        except urllib.error.HTTPError as refused:
            refused.close()  # (its connection, else left to the garbage collector)
            raise
        return json.loads(body) if body.lstrip().startswith(("{", "[")) else body

    def try_get(self, path: str) -> Any:
        if self.proc.poll() is not None:
            raise AssertionError(f"flower exited with status {self.proc.returncode}")
        try:
            return self.get(path)
        except (urllib.error.URLError, ConnectionError, TimeoutError):
            return None

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self.log.close()


@pytest.fixture()
def flower(db: str, logs_dir: Path, own_broker: str) -> Iterator[Flower]:
    """A Flower on the broker of this test's own workers (``own_broker``)."""
    process = Flower(db, logs_dir / f"flower-{free_port()}.log", broker_url=own_broker)
    yield process
    process.stop()


@pytest.mark.slow
def test_flower_shows_the_worker_a_run_step_task_and_the_queues(
    db: str, start_worker: Callable[..., WorkerProcess], flower: Flower
) -> None:
    # Given a real worker started without -E (task events off, interlude's default) and a real
    # Flower watching the same Redis
    worker = start_worker("-c", "1", task_events=False)
    assert wait_for(lambda: flower.try_get("/healthcheck"), timeout=60) == "OK"
    # Then Flower turns the worker's task events on itself: it sees the tasks of quick runs
    wait_for(lambda: _events_reach(flower), timeout=90)

    # Then Flower lists the worker, with interlude's tasks under their stable names
    def our_worker() -> dict[str, Any] | None:
        workers = flower.try_get("/api/workers?refresh=1") or {}
        return next((v for k, v in workers.items() if k.startswith(f"{worker.name}@")), None)

    info = wait_for(our_worker, timeout=60)
    assert {TASK_STEP, "interlude.resume_run", "interlude.sweep_expired", "interlude.reap"} <= set(
        info["registered"]
    )
    consumed = {q["name"] for q in info["active_queues"]}
    assert {QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE} <= consumed

    # When a run executes a step (here up to its approval gate)
    run_id = enqueue_run("deploy_gate", DEPLOY)

    # Then Flower has seen an interlude.run_step task for it succeed, on a worker it lists
    def step_task() -> dict[str, Any] | None:
        tasks = flower.try_get(f"/api/tasks?taskname={TASK_STEP}") or {}
        return next((t for t in tasks.values() if run_id in str(t.get("args"))), None)

    task = wait_for(lambda: (t := step_task()) and t["state"] == "SUCCESS" and t, timeout=60)
    assert task["name"] == TASK_STEP
    assert task["worker"] in flower.get("/api/workers")
    assert TASK_STEP in flower.get("/api/task/types")["task-types"]
    # ... and the lengths of interlude's queues, now empty: a waiting run holds no message
    lengths = {q["name"]: q["messages"] for q in flower.get("/api/queues/length")["active_queues"]}
    assert {QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE} <= set(lengths)
    assert lengths[QUEUE_STEPS] == 0


@pytest.fixture()
def own_flower(db: str, logs_dir: Path, own_broker: str) -> Iterator[tuple[Flower, str]]:
    """A Flower, this process and the test's workers on the test's own broker: the session's
    shared worker cannot take these tasks, and Flower sees only this test's."""
    process = Flower(db, logs_dir / f"flower-{free_port()}.log", broker_url=own_broker)
    yield process, own_broker
    process.stop()


@pytest.mark.slow
def test_flower_shows_retries_then_the_failure_of_a_failing_step_with_its_flow_and_step(
    db: str, start_worker: Callable[..., WorkerProcess], own_flower: tuple[Flower, str]
) -> None:
    flower, broker = own_flower
    # Given a real worker and a real Flower on the same broker, seeing task events already
    worker = start_worker("-c", "1", INTERLUDE_BROKER_URL=broker)
    assert wait_for(lambda: flower.try_get("/healthcheck"), timeout=60) == "OK"
    wait_for(lambda: _events_reach(flower), timeout=90)

    # When a run's step fails three times (two retries allowed): the run fails
    run_id = enqueue_run("flaky", {"fail_times": 5})

    seen: list[object] = []

    def three_done() -> list[dict[str, Any]] | None:
        if flower.try_get("/healthcheck") is None:
            seen[:] = ["(Flower did not answer)"]
            return None
        tasks = _tasks_of(flower, run_id)
        seen[:] = [{k: t.get(k) for k in ("uuid", "state", "received")} for t in tasks]
        done = [t for t in tasks if t["state"] in ("RETRY", "FAILURE", "SUCCESS")]
        return tasks if len(done) == 3 else None

    try:
        tasks = wait_for(three_done, timeout=90)
    except AssertionError as exc:
        raise AssertionError(f"{exc}; Flower last showed this run's tasks as {seen}") from None
    assert get_run(run_id).state == "failed"

    # Then Flower shows the first two attempts as RETRY and the last one as FAILURE
    assert [t["state"] for t in tasks] == ["RETRY", "RETRY", "FAILURE"]
    assert len(tasks) == 3  # interlude published each retry once; Celery published none
    last = tasks[-1]
    exception = last["exception"]
    assert "step flaky:sometimes failed (attempt 3): RuntimeError: flaky failure 3" in exception
    assert "attempt 1" in tasks[0]["exception"]
    # ... and /api/tasks?state=FAILURE lists it
    failed = flower.get("/api/tasks?state=FAILURE")
    assert last["uuid"] in failed
    # And every task carries the run's flow and step, searchable in Flower
    assert {t["kwargs"] for t in tasks} == {"{'flow': 'flaky', 'step': 'sometimes'}"}
    found = flower.get("/api/tasks?search=kwargs:flow%3Dflaky")
    assert {t["uuid"] for t in tasks} <= set(found)
    # And each attempt's traceback in Flower is the step's own: it goes down to the line that
    # raised in the flow's module, not only to the task's re-raise (and holds no "During
    # handling": the task raised it after the commit, outside any handler)
    for task in tasks:
        assert "During handling" not in task["traceback"]
        assert 'tests/flows/engine.py", line' in task["traceback"], task["traceback"]
        assert 'raise RuntimeError(f"flaky failure {tries}")' in task["traceback"]
    # ... and Celery logged the expected failure on one line, the step's traceback went into the
    # worker's log with the run named
    lines = [line for line in worker.output().splitlines() if last["uuid"] in line]
    assert any("raised expected" in line for line in lines), lines
    assert "raised unexpected" not in worker.output()
    logged = worker.output().split("step sometimes failed (attempt 3)", 1)[1]
    assert logged.startswith(f": RuntimeError: flaky failure 3 [run {run_id}")
    assert 'raise RuntimeError(f"flaky failure {tries}")' in logged.split("\n\n")[0]


def _tasks_of(flower: Flower, run_id: str) -> list[dict[str, Any]]:
    """The step tasks Flower has seen for ``run_id``, in the order they were received."""
    tasks = flower.try_get(f"/api/tasks?taskname={TASK_STEP}") or {}
    mine = [dict(t, uuid=k) for k, t in tasks.items() if run_id in str(t.get("args"))]
    return sorted(mine, key=lambda t: t.get("received") or 0)


def _events_reach(flower: Flower) -> bool:
    """Whether Flower sees the worker's events (it may connect after answering /healthcheck):
    a quick run's task shows as succeeded within a few seconds."""
    run_id = enqueue_run("quick", {})
    try:
        wait_for(lambda: [t["state"] for t in _tasks_of(flower, run_id)] == ["SUCCESS"], 10)
    except AssertionError:
        return False
    return True


def _listening_on(port: int) -> set[str]:
    """The local addresses with a listening TCP socket on ``port`` (/proc/net/tcp{,6})."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                local, state = row.split()[1], row.split()[3]
                address, _, hex_port = local.partition(":")
                if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                    found.add(address)
    return found


@pytest.mark.slow
def test_flower_without_a_login_does_not_start(db: str, logs_dir: Path) -> None:
    # Given Flower started with interlude's app and no login (issue 42, finding 7)
    flower = Flower(db, logs_dir / f"flower-{free_port()}.log", login=None, address=None)
    try:
        status = flower.proc.wait(60)
    finally:
        flower.stop()
    # Then it exits at once, saying in one line what it needs, and served nothing
    assert status == 1, flower.output()
    [line] = [ln for ln in flower.output().splitlines() if ln.startswith("interlude: error:")]
    assert "FLOWER_BASIC_AUTH=user:password" in line
    assert "Traceback" not in flower.output()


@pytest.mark.slow
def test_flower_listens_on_this_machine_only_and_every_page_asks_for_the_login(
    db: str, logs_dir: Path, own_broker: str
) -> None:
    # Given Flower started with a login and no --address
    flower = Flower(db, logs_dir / f"flower-{free_port()}.log", broker_url=own_broker, address=None)
    try:
        assert wait_for(lambda: flower.try_get("/healthcheck"), timeout=60) == "OK"
        # Then it listens on the loopback address only (0100007F: 127.0.0.1)
        assert _listening_on(flower.port) == {"0100007F"}
        # And its pages ask for the login, and show themselves with it
        for page in ("/", "/workers", "/tasks/datatable", "/api/workers"):
            with pytest.raises(urllib.error.HTTPError) as refused:
                flower.get(page, signed_in=False)
            assert refused.value.code == 401, page
        for page in ("/", "/workers", "/api/workers"):
            assert flower.get(page) is not None
    finally:
        flower.stop()
