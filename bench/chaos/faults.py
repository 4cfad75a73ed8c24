"""The faults a chaos run injects, one at a time, every 5 to 20 s at random (seeded).

The first fault of every run, and some later ones, freeze a process *inside an effect's call*
(``freeze_in_effect``): frozen longer than its lease, grace and the next owner's call take, it
wakes up as a zombie and lands its call late. That is the window Guarantee 2 speaks of, which
the report measures at the plain target and the fencing target.

Each fault notes when it began and which runs were in flight then (queued, running or
resuming): its recovery time is how long those runs took to move again (see ``report``).
"""

from __future__ import annotations

import logging
import os
import random
import signal
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import Engine, func, select

from bench.chaos.cluster import Cluster
from models.db import utcnow
from models.tables import Event, Run

log = logging.getLogger("bench.chaos")

FREEZE_IN_EFFECT = "freeze_in_effect"
KINDS = (
    FREEZE_IN_EFFECT,
    "kill_worker",
    "kill_child",
    "stop_worker",
    "stop_child",
    "broker_restart",
    "postgres_restart",
    "beat_restart",
)
INTERVAL = (5.0, 20.0)
FREEZE = (8.0, 14.0)
# Inside an effect: past the lease (5 s), the reaper, the grace (2 s), the next owner's claim,
# reconciliation or an operator's repair, and its own call, with room for a loaded machine.
FREEZE_IN_EFFECT_SECONDS = (14.0, 18.0)
# How long the injector waits for a process to be inside an effect's call.
AIM_SECONDS = 30.0
IN_FLIGHT = ("queued", "running", "resuming")


@dataclass
class Fault:
    kind: str
    at: datetime
    # Runs queued, running or resuming when the fault began, each with the id of its last
    # audit event then: "moved again" means a later event, whatever clock stamped it.
    in_flight: dict[str, int]
    detail: str = ""
    ended: datetime | None = None


@dataclass
class Injector:
    cluster: Cluster
    engine: Engine
    rng: random.Random
    faults: list[Fault] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)

    def run(self, until: float, stop: threading.Event) -> None:
        """Inject faults until the monotonic time ``until`` (or ``stop`` is set)."""
        first = True
        while not stop.wait(self.rng.uniform(*INTERVAL)) and time.monotonic() < until:
            # Every run exercises the zombie case at least once.
            kind = FREEZE_IN_EFFECT if first else self.rng.choice(KINDS)
            first = False
            try:
                # Aimed first, so that the fault begins when the process is frozen.
                aimed = self._aim() if kind == FREEZE_IN_EFFECT else None
                fault = Fault(kind, utcnow(), self._in_flight())
                fault.detail = self._inject(kind) if aimed is None else self._hold(*aimed)
            except Exception as exc:  # a fault that could not be injected is reported
                self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")
                continue
            fault.ended = utcnow()
            self.faults.append(fault)
            log.info("fault %s %s (%d runs in flight)", kind, fault.detail, len(fault.in_flight))

    def _in_flight(self) -> dict[str, int]:
        query = (
            select(Run.id, func.max(Event.id))
            .join(Event, Event.run_id == Run.id)
            .where(Run.state.in_(IN_FLIGHT))
            .group_by(Run.id)
        )
        for _ in range(50):
            try:
                with self.engine.connect() as conn:
                    return {run_id: int(last) for run_id, last in conn.execute(query)}
            except Exception:
                time.sleep(0.2)
        return {}

    def _inject(self, kind: str) -> str:
        actions: dict[str, Callable[[], str]] = {
            "kill_worker": self._kill_worker,
            "kill_child": lambda: self._signal_child(signal.SIGKILL),
            "stop_worker": self._stop_worker,
            "stop_child": self._stop_child,
            "broker_restart": self._restart_broker,
            "postgres_restart": self._restart_postgres,
            "beat_restart": self._restart_beat,
        }
        return actions[kind]()

    def _pick_worker(self) -> int:
        return self.rng.randrange(len(self.cluster.workers))

    def _kill_worker(self) -> str:
        index = self._pick_worker()
        old = self.cluster.workers[index]
        old.kill()
        # A supervisor (systemd, Kubernetes) would start another one.
        self.cluster.workers[index] = self.cluster.new_worker()
        return f"pid {old.pid}"

    def _signal_child(self, sig: signal.Signals) -> str:
        worker = self.cluster.workers[self._pick_worker()]
        children = self.cluster.children(worker)
        if not children:
            raise RuntimeError(f"worker {worker.pid} has no pool children")
        pid = self.rng.choice(children)
        os.kill(pid, sig)
        return f"pid {pid}"

    def _frozen(self, pids: list[int], thaw: Callable[[], None]) -> str:
        seconds = self.rng.uniform(*FREEZE)
        self.cluster.stopped.update(pids)
        time.sleep(seconds)
        thaw()
        self.cluster.stopped.difference_update(pids)
        return f"{seconds:.1f}s"

    def _stop_worker(self) -> str:
        worker = self.cluster.workers[self._pick_worker()]
        pids = [worker.pid, *self.cluster.children(worker)]
        self.cluster.signal_group(worker, signal.SIGSTOP)
        return f"pid {worker.pid} " + self._frozen(
            pids, lambda: self.cluster.signal_group(worker, signal.SIGCONT)
        )

    def _stop_child(self) -> str:
        detail = self._signal_child(signal.SIGSTOP)
        pid = int(detail.split()[-1])
        return f"{detail} " + self._frozen([pid], lambda: os.kill(pid, signal.SIGCONT))

    def _aim(self) -> tuple[int, str]:
        """SIGSTOP a pool process while it is inside an effect's call: its pid and the call."""
        from bench.chaos.flow import INFLIGHT, target

        deadline = time.monotonic() + AIM_SECONDS
        while time.monotonic() < deadline:
            ours = {pid for w in self.cluster.workers for pid in self.cluster.children(w)}
            calls = {int(pid) for pid in target().hkeys(INFLIGHT)}
            aimed = sorted(pid for pid in calls if pid in ours and pid not in self.cluster.stopped)
            if not aimed:
                time.sleep(0.02)
                continue
            pid = self.rng.choice(aimed)
            os.kill(pid, signal.SIGSTOP)
            # Frozen, it cannot leave the call any more: is it still inside it?
            inside = target().hget(INFLIGHT, str(pid))
            if inside is None:
                os.kill(pid, signal.SIGCONT)
                continue
            self.cluster.stopped.add(pid)
            return pid, inside.decode() if isinstance(inside, bytes) else str(inside)
        raise RuntimeError(f"no process was inside an effect's call within {AIM_SECONDS:.0f}s")

    def _hold(self, pid: int, call: str) -> str:
        """Keep the aimed process frozen past the next owner's call, then let it go on."""
        seconds = self.rng.uniform(*FREEZE_IN_EFFECT_SECONDS)
        time.sleep(seconds)
        os.kill(pid, signal.SIGCONT)
        self.cluster.stopped.discard(pid)
        run_id, effect, token = call.split()
        return f"pid {pid} in {effect} of run {run_id} (token {token}) {seconds:.1f}s"

    def _restart_broker(self) -> str:
        self.cluster.broker.stop()
        self.cluster.broker.start()
        return ""

    def _restart_postgres(self) -> str:
        self.cluster.postgres.stop()  # pg_ctl stop -m fast
        self.cluster.postgres.start()
        return ""

    def _restart_beat(self) -> str:
        assert self.cluster.beat is not None
        self.cluster.beat.stop()
        self.cluster.start_beat()
        return ""
