"""The cluster a chaos run owns: private servers on free ports, two workers and beat.

The servers come from the outage tests' ``private_services`` (never the machine's shared
ones); the broker is a private Redis or, with ``--broker rabbitmq``, a private RabbitMQ node.
The outside targets live in a second private Redis that no fault touches.
"""

from __future__ import annotations

import contextlib
import os
import signal
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from tests.acceptance.private_services import PrivatePostgres, PrivateRedis
from tests.services import WorkerProcess

WORKERS = 2
CONCURRENCY = 2
# Short leases and a quick reaper, so that recovery is a matter of seconds; a grace longer
# than a call of the flow's effects takes to land.
TIMINGS = {
    "INTERLUDE_LEASE_SECONDS": "5",
    "INTERLUDE_REAP_INTERVAL": "0.5",
    "INTERLUDE_SWEEP_INTERVAL": "2",
    "INTERLUDE_REDISPATCH_AFTER": "3",
    "INTERLUDE_EFFECT_GRACE": "2",
    "INTERLUDE_EFFECT_MARGIN": "1",
}


class Broker(Protocol):
    """A broker a fault may restart (``PrivateRedis`` behind ``RedisBroker``, ``PrivateRabbit``)."""

    def url(self) -> str: ...

    def start(self) -> object: ...

    def stop(self) -> None: ...


class RedisBroker:
    """The private Redis as a broker (no persistence: a restart loses every message)."""

    def __init__(self, directory: Path) -> None:
        self.server = PrivateRedis(directory)

    def url(self) -> str:
        return self.server.url()

    def start(self) -> object:
        return self.server.start()

    def stop(self) -> None:
        self.server.stop()


@dataclass
class Cluster:
    broker: Broker
    directory: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="chaos-")))
    postgres: PrivatePostgres = field(default_factory=PrivatePostgres)
    workers: list[WorkerProcess] = field(default_factory=list)
    beat: WorkerProcess | None = None
    target: PrivateRedis | None = None
    stopped: set[int] = field(default_factory=set)

    def env(self) -> dict[str, str]:
        assert self.target is not None
        return {
            **os.environ,
            **TIMINGS,
            "INTERLUDE_DATABASE_URL": self.postgres.url,
            "INTERLUDE_BROKER_URL": self.broker.url(),
            "INTERLUDE_FLOWS": "bench.chaos.flow",
            "CHAOS_TARGET_URL": self.target.url(),
        }

    def start(self) -> None:
        from models.migrate import upgrade

        self.target = PrivateRedis(self.directory).start()
        self.broker.start()
        self.postgres.init()
        self.postgres.start()
        upgrade(self.postgres.url)
        for _ in range(WORKERS):
            self.workers.append(self.new_worker())
        self.start_beat()

    def new_worker(self) -> WorkerProcess:
        return WorkerProcess(self.env(), self.directory, "-c", str(CONCURRENCY)).start()

    def start_beat(self) -> None:
        schedule = str(self.directory / "beat-schedule")
        self.beat = WorkerProcess(self.env(), self.directory, "-s", schedule, kind="beat").start()

    def children(self, worker: WorkerProcess) -> list[int]:
        """The pool processes of ``worker`` (Linux: from /proc)."""
        path = Path(f"/proc/{worker.pid}/task/{worker.pid}/children")
        try:
            return [int(pid) for pid in path.read_text().split()]
        except (OSError, ValueError):
            return []

    def signal_group(self, worker: WorkerProcess, sig: signal.Signals) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(worker.pid, sig)

    def stop(self) -> None:
        """Stop everything, thawing anything a fault left stopped first."""
        for pid in list(self.stopped):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)
        for worker in self.workers:
            self.signal_group(worker, signal.SIGCONT)
            worker.stop()
        if self.beat is not None:
            self.beat.stop()
        remove = getattr(self.broker, "remove", self.broker.stop)
        remove()
        if self.target is not None:
            self.target.stop()
        self.postgres.remove()
