"""interlude's Celery app with the bench's counters: ``celery -A bench.counting_app worker``.

Used only by the counting runs of ``bench.w1``; each process of the worker (the parent and
every pool child) counts its own database work and writes it to ``$BENCH_COUNTS_DIR`` when it
shuts down.
"""

from __future__ import annotations

from typing import Any

from celery import signals

from bench import counting
from worker import app

counting.install("worker-parent")


@signals.worker_process_init.connect
def _child_starts(**_: Any) -> None:
    counting.install("worker-child")


@signals.worker_process_shutdown.connect
def _child_stops(**_: Any) -> None:
    counting.dump()


@signals.worker_shutdown.connect
def _parent_stops(**_: Any) -> None:
    counting.dump()


__all__ = ["app"]
