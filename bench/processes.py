"""Start and stop the ``celery worker`` processes the benchmarks measure, as a user would."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import redis

from bench import cpu
from bench.machine_cpu import busy_seconds

if TYPE_CHECKING:
    from celery import Celery

ROOT = Path(__file__).resolve().parent.parent
BROKER_URL = "redis://127.0.0.1:6379/14"
COUNTER_URL = "redis://127.0.0.1:6379/13"
INTERLUDE_QUEUES = "interlude.steps,interlude.resumes"
LOCK_KEY = "bench:running"
LOCK_HELD_ENV = "BENCH_LOCK_HELD"
LOCK_SECONDS = 4 * 3600
_RELEASE = "if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def children(pid: int) -> list[int]:
    """The pids of the processes whose parent is ``pid`` (a worker's pool children), sorted."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == pid:
            found.append(int(stat.parent.name))
    return sorted(found)


@contextmanager
def exclusive(what: str) -> Iterator[None]:
    """One bench at a time: they share Redis DBs 13 and 14 and the queues' names in them.

    Two at once would take each other's tasks (and flush each other's broker), and would
    measure each other's load anyway. A second one waits; a lock whose process died is taken
    over. Processes this one starts inherit the lock.
    """
    # A terminated bench still stops its worker and drops its database (finally blocks).
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    if os.environ.get(LOCK_HELD_ENV):
        yield
        return
    locks = redis.Redis.from_url(COUNTER_URL)
    me = f"{os.getpid()} {what}"
    told = False
    while not locks.set(LOCK_KEY, me, nx=True, ex=LOCK_SECONDS):
        holder = (locks.get(LOCK_KEY) or b"").decode()
        pid = holder.split(" ", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            locks.eval(_RELEASE, 1, LOCK_KEY, holder)
            continue
        if not told:
            print(f"waiting for another bench to finish: pid {holder}", file=sys.stderr)
            told = True
        time.sleep(1)
    os.environ[LOCK_HELD_ENV] = "1"
    try:
        yield
    finally:
        os.environ.pop(LOCK_HELD_ENV, None)
        locks.eval(_RELEASE, 1, LOCK_KEY, me)


def start_worker(
    app: str, env: dict[str, str], queues: str, pool: list[str]
) -> subprocess.Popen[bytes]:
    """``celery -A app worker <pool>`` on ``queues``; returns once it says ``ready.``."""
    log = Path(tempfile.mkdtemp(prefix="bench-")) / "worker.log"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "celery",
            "-A",
            app,
            "worker",
            *pool,
            "-l",
            "info",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
            "-Q",
            queues,
        ],
        cwd=ROOT,
        env=env,
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 60
    try:
        while b"ready." not in log.read_bytes():
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError(f"worker did not start:\n{log.read_text()}")
            time.sleep(0.05)
    except BaseException:  # interrupted or terminated too: leave no worker behind
        proc.kill()
        proc.wait(10)
        raise
    proc.log_path = log  # type: ignore[attr-defined]
    return proc


def stop_worker(proc: subprocess.Popen[bytes], timeout: float = 30) -> None:
    """Warm shutdown (SIGTERM), so that every process of the worker runs its shutdown hooks."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def bench_env(database_url: str, **extra: str) -> dict[str, str]:
    """The environment of a measured interlude process (worker or caller)."""
    return {
        **os.environ,
        "INTERLUDE_DATABASE_URL": database_url,
        "INTERLUDE_BROKER_URL": BROKER_URL,
        "INTERLUDE_FLOWS": "bench.flows",
        **extra,
    }


def floor_env() -> dict[str, str]:
    """The environment of a worker of Celery alone (a floor, the bare chain): the bench's
    broker, and the Redis its tasks count in."""
    return {**os.environ, "BENCH_BROKER_URL": BROKER_URL, "BENCH_COUNTER_URL": COUNTER_URL}


def counter() -> redis.Redis:
    """The Redis a floor's tasks count in: the worker's (``floor_env``), or the bench's own."""
    return redis.Redis.from_url(os.environ.get("BENCH_COUNTER_URL", COUNTER_URL))


def floor_app(name: str, queue: str, *, task_events: bool | None = None) -> Celery:
    """A Celery app for a broker floor, configured as ``worker/app.py`` configures interlude's.

    JSON only, late acks, prefetch 1, task events (the worker's and task-sent) as interlude's
    settings say (``INTERLUDE_TASK_EVENTS``) unless ``task_events`` is given, no results (one
    disabled backend shared by a worker's threads), and interlude's Redis transport (one
    command client per channel) with interlude's transport options (no acknowledgement
    emulation); its tasks go to ``queue`` on the bench's broker. The floors measure Celery
    alone with these settings, doing no durable work. (Until 2026-12-07 they lacked the
    transport options, and every floor paid kombu's acknowledgement emulation, which interlude
    turned off on 2026-12-03: two more Redis round trips a task. tests/unit/test_bench_floor_app
    holds the two configurations together.)
    """
    from celery import Celery

    from models.settings import get_settings
    from worker.engine import redis_transport
    from worker.engine.broker_options import broker_options

    url = os.environ.get("BENCH_BROKER_URL", BROKER_URL)
    settings = get_settings().model_copy(update={"broker_url": url})
    events = settings.task_events if task_events is None else task_events

    app = Celery(name, broker=url)
    app.conf.update(
        broker_transport_options=broker_options(settings),
        task_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_send_task_events=events,
        task_send_sent_event=events,
        task_ignore_result=True,
        result_backend_thread_safe=True,
        task_default_queue=queue,
        broker_transport=f"{redis_transport.__name__}:Transport",
    )
    return app


def publish(task: Any, *args: Any) -> None:
    """``task(*args)`` published as interlude publishes its steps: the queue declared only where
    the broker needs it, the arguments' text given (``worker.engine.dispatch``), so that a
    floor pays no more for its hop than interlude does."""
    from worker.engine.dispatch import declaring

    task.apply_async(args, argsrepr=repr(list(args)), **declaring(task.app))


def wait_for_count(
    counter: redis.Redis,
    key: str,
    runs: int,
    what: str,
    *,
    timeout: float = 300,
    poll: float = 0.005,
) -> None:
    """Until ``runs`` tasks counted themselves at ``key`` (``what`` names them in the error)."""
    deadline = time.monotonic() + timeout
    while int(counter.get(key) or 0) < runs:  # type: ignore[arg-type]
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not all run in time")
        time.sleep(poll)


def two_hops(
    app: str,
    env: dict[str, str],
    queue: str,
    pool: str,
    runs: int,
    *,
    first: Callable[[int], None],
    second: Callable[[int], None],
    wait: Callable[[str, int], None],
    measure_cpu: bool = False,
) -> dict[str, Any]:
    """W1's two hops on Celery alone, against one worker of ``app`` (``--pool solo`` or
    ``-c 1``): ``first(i)`` for every run, until ``wait("first", runs)`` returns, then
    ``second(i)`` likewise. The rate and the machine's CPU per run over that part (and each
    process's, ``measure_cpu``): the floors' shared measurement."""
    options = ["--pool", "solo"] if pool == "solo" else ["-c", "1"]
    worker = start_worker(app, env, queue, options)
    try:
        with cpu.spent([worker.pid], enabled=measure_cpu) as spent:
            machine, start = busy_seconds(), time.perf_counter()
            for i in range(runs):
                first(i)
            wait("first", runs)
            for i in range(runs):
                second(i)
            wait("second", runs)
            seconds, machine = time.perf_counter() - start, busy_seconds() - machine
    finally:
        stop_worker(worker)
    result: dict[str, Any] = {
        "runs": runs,
        "seconds": seconds,
        "rate": runs / seconds,
        "cpu_ms_per_run": 1000 * machine / runs,
    }
    if spent:
        result["cpu"] = spent
    return result
