"""The people and programs around a chaos run: a starter, a resumer and an operator.

They call the public API (``enqueue_run``, ``list_interrupts``, ``submit_resume``) from this
process, retrying whatever a fault made fail. The resumer answers each approval once, twice
with the same contract, or three times at once with different keys; the operator settles
each repair by looking the effect's key up at the deduplicating target.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta
from functools import partial
from typing import Any

from bench.chaos.flow import APPROVER_ROLE, OPERATOR_ROLE, lookup
from models.contracts import InterruptView
from models.db import utcnow
from worker import add_actor, enqueue_run, list_interrupts, submit_resume

log = logging.getLogger("bench.chaos")
MODES = ("single", "repeated", "concurrent")
POLL_SECONDS = 0.3
# Outcomes after which an interrupt needs no more submissions from us.
SETTLED = ("accepted", "duplicate", "stale")


def retrying(call: Callable[[], Any], stop: threading.Event, pause: float = 0.5) -> Any:
    """Call until it works (a fault may hold the database or the broker for a while)."""
    while True:
        try:
            return call()
        except Exception as exc:
            log.debug("retrying after %s", exc)
            if stop.wait(pause):
                raise


def contract(interrupt: InterruptView, actor: str, input: dict[str, Any]) -> dict[str, Any]:
    return {
        "schema_version": "resume.v1",
        "run_id": interrupt.run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": "human", "id": actor},
        "decision": "approved",
        "input": input,
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "idempotency_key": uuid.uuid4().hex,
        "expires_at": (utcnow() + timedelta(hours=1)).isoformat(),
    }


@dataclass
class Traffic:
    seed: int
    runs: int
    window: float
    started: dict[str, str] = field(default_factory=dict)
    outcomes: Counter[str] = field(default_factory=Counter)
    modes: Counter[str] = field(default_factory=Counter)
    accepted_seen: Counter[str] = field(default_factory=Counter)
    repairs_answered: int = 0
    answered: set[str] = field(default_factory=set)
    lock: threading.Lock = field(default_factory=threading.Lock)
    credentials: dict[str, str] = field(default_factory=dict)

    def enrol(self) -> None:
        self.credentials["approver"] = add_actor("chaos-approver-1", [APPROVER_ROLE])
        self.credentials["operator"] = add_actor("chaos-operator-1", [OPERATOR_ROLE])

    def start_runs(self, stop: threading.Event) -> None:
        """Start ``runs`` runs evenly over ``window`` seconds (idempotent keys: safe to retry)."""
        began = time.monotonic()
        for n in range(self.runs):
            due = began + self.window * n / max(self.runs, 1)
            if stop.wait(max(0.0, due - time.monotonic())):
                return
            key = f"chaos-{self.seed}-{n}"
            try:
                self.started[key] = retrying(partial(enqueue_run, "chaos", {"n": n}, key), stop)
            except Exception:
                return

    def resume(self, stop: threading.Event) -> None:
        rng = random.Random(self.seed + 1)
        while not stop.wait(POLL_SECONDS):
            for interrupt in self._pending("approval"):
                if interrupt.id not in self.answered:
                    self._answer_approval(interrupt, rng.choice(MODES))

    def operate(self, stop: threading.Event) -> None:
        while not stop.wait(POLL_SECONDS):
            for interrupt in self._pending("repair"):
                if interrupt.id in self.answered:
                    continue
                key = interrupt.evidence["idempotency_key"]
                try:
                    found = lookup(key)
                except Exception:
                    continue
                finding = (
                    {"outcome": "not_applied", "note": "not at the target"}
                    if found is None
                    else {"outcome": "applied", "receipt": found}
                )
                if self._submit(contract(interrupt, "chaos-operator-1", finding), "operator"):
                    self.repairs_answered += 1

    def _pending(self, kind: str) -> list[InterruptView]:
        try:
            return list_interrupts(status="pending", kind=kind, limit=100)
        except Exception:
            return []

    def _answer_approval(self, interrupt: InterruptView, mode: str) -> None:
        payload = contract(interrupt, "chaos-approver-1", {"note": mode})
        if mode == "single":
            self._submit(payload, "approver")
        elif mode == "repeated":
            # The same submission again, as a client retrying after a timeout would.
            for _ in range(3):
                self._submit(payload, "approver")
        else:
            threads = [
                threading.Thread(
                    target=self._submit,
                    args=({**payload, "idempotency_key": uuid.uuid4().hex}, "approver"),
                )
                for _ in range(3)
            ]
            for thread in threads:
                thread.start()
            for thread in threads:
                thread.join()
        with self.lock:
            self.modes[mode] += 1

    def _submit(self, payload: dict[str, Any], who: str) -> bool:
        """Submit once; True when the interrupt is settled (accepted now or before)."""
        try:
            result = submit_resume(payload, self.credentials[who])
        except Exception as exc:  # the database is down: try again on a later poll
            log.debug("resume failed: %s", exc)
            return False
        with self.lock:
            self.outcomes[result.outcome.value] += 1
            if result.accepted:
                self.accepted_seen[payload["interrupt_id"]] += 1
            if result.outcome.value in SETTLED:
                self.answered.add(payload["interrupt_id"])
        return result.outcome.value in SETTLED
