"""A bare three-task Celery chain: the baseline interlude's throughput is compared with.

Same broker, same worker settings (JSON, late acks, prefetch 1), no durability at all.
"""

from __future__ import annotations

import os
from typing import Any

import redis
from celery import Celery

app = Celery("bare", broker=os.environ.get("BENCH_BROKER_URL", "redis://127.0.0.1:6379/14"))
app.conf.update(
    task_serializer="json",
    accept_content=["json"],
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    worker_prefetch_multiplier=1,
    task_ignore_result=True,
    task_default_queue="bare",
)
_done = redis.Redis.from_url(os.environ.get("BENCH_COUNTER_URL", "redis://127.0.0.1:6379/13"))


@app.task(name="bare.first")  # type: ignore[untyped-decorator]
def first(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "trail": ["first"]}


@app.task(name="bare.second")  # type: ignore[untyped-decorator]
def second(state: dict[str, Any]) -> dict[str, Any]:
    return {**state, "trail": [*state["trail"], "second"]}


@app.task(name="bare.third")  # type: ignore[untyped-decorator]
def third(state: dict[str, Any]) -> None:
    _done.incr("bare:done")
