"""A flow with two notifiers, for the notification tests.

Each notifier counts its calls in the test Redis database (``INTERLUDE_TEST_REDIS``), from
whichever process calls it. A test makes ``tell_chat`` fail its first N calls for a run
(``notice:chat-fails:RUN``), or sleep at each call for the runs of a ticket
(``notice:chat-sleeps:TICKET``, seconds: set before the run starts in a worker), and sleep on
through the soft time limit (``notice:chat-deaf:TICKET``), or kill its own process
(``notice:chat-crashes:TICKET``).
"""

from __future__ import annotations

import json
import os
import signal
import time

from celery.exceptions import SoftTimeLimitExceeded

from models.contracts import InterruptView
from tests.flows.interrupts import Approval, scratch_redis
from worker import Flow, StepContext, get_interrupt

noticed = Flow("noticed", version=1)


@noticed.step()
def ask(ctx: StepContext) -> None:
    ctx.interrupt(
        "approve",
        kind="approval",
        input=Approval,
        authority=["approver"],
        scope={"run": ctx.run_id},
        evidence={"ticket": ctx.input.get("ticket", "T-1")},
        expires_in=3600,
        reason="approve the ticket",
    )
    return None


def calls(notifier: str, run_id: str) -> list[dict[str, object]]:
    """Each call of ``notifier`` for the run: the interrupt, its status then, the process."""
    raw = scratch_redis().lrange(f"notice:{notifier}:{run_id}", 0, -1)
    return [json.loads(entry) for entry in raw]


def _called(notifier: str, interrupt: InterruptView) -> int:
    # The status read through a fresh transaction: what the database says at the call.
    status = get_interrupt(interrupt.id).status
    note = {"id": interrupt.id, "status": status, "pid": os.getpid()}
    return int(scratch_redis().rpush(f"notice:{notifier}:{interrupt.run_id}", json.dumps(note)))


@noticed.notifier
def tell_chat(interrupt: InterruptView) -> None:
    call = _called("chat", interrupt)
    redis = scratch_redis()
    ticket = interrupt.evidence["ticket"]
    if redis.get(f"notice:chat-crashes:{ticket}"):
        # (a crash in C code, the kernel's OOM killer: the process dies mid-call)
        os.kill(os.getpid(), signal.SIGKILL)
    sleep = float(redis.get(f"notice:chat-sleeps:{ticket}") or 0)
    if sleep:
        try:
            time.sleep(sleep)
        except SoftTimeLimitExceeded:
            # A call deaf to the soft time limit (stuck in C code, a bare except): on it goes.
            if not redis.get(f"notice:chat-deaf:{ticket}"):
                raise
            time.sleep(sleep)
    if call <= int(redis.get(f"notice:chat-fails:{interrupt.run_id}") or 0):
        raise ConnectionError(f"chat said 503\nat call {call}")


@noticed.notifier
def tell_mail(interrupt: InterruptView) -> None:
    _called("mail", interrupt)
