"""A step task's message names the flow of the run it was published for, and the task reads it.

The claim then sends the server that flow's steps only, not every step the worker has loaded
(``tests/integration/test_claim_at_once.py``). Here the message is the real one: published by
interlude's Celery publisher to the session's Redis broker, on a queue no worker takes, read
back raw, and its headers handed to the task's request as a worker would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from tests.conftest import REDIS_DB
from tests.services import redis_client
from worker.app import app
from worker.engine import dispatch
from worker.engine.tasknames import FLOW_HEADER, TASK_STEP
from worker.engine.tasks import flow_named_by, run_step

QUEUE = "interlude.test_headers"
BINDING = f"_kombu.binding.{QUEUE}"  # where kombu's Redis transport records a declared queue


@pytest.fixture()
def spare_queue() -> Iterator[str]:
    """QUEUE, empty; Celery adds a queue it is asked to publish to to the app's queues, and
    this process's app gets its four back afterwards (``test_app_config`` counts them)."""
    broker = redis_client(REDIS_DB)
    broker.delete(QUEUE, BINDING)
    try:
        yield QUEUE
    finally:
        app.amqp.queues.pop(QUEUE, None)
        broker.delete(QUEUE, BINDING)


def test_a_step_tasks_message_names_its_flow(spare_queue: str) -> None:
    broker = redis_client(REDIS_DB)
    # Given a step published as interlude publishes every step
    dispatch.celery_publisher(
        TASK_STEP, "r1", queue=spare_queue, countdown=None, flow="procurement", step="certify"
    )
    # Then its message carries the flow in a header of its own, beside Celery's
    raw = broker.rpop(spare_queue)
    assert raw is not None
    headers = json.loads(raw)["headers"]
    assert headers[FLOW_HEADER] == "procurement"
    assert headers["task"] == TASK_STEP
    assert headers["argsrepr"] == "['r1']"
    # ...published without declaring its queue first: on Redis the push makes the list
    assert not broker.exists(BINDING)
    # ...which the task reads from its request, as a worker gives it the message's headers
    run_step.push_request(**headers)
    try:
        assert flow_named_by(run_step) == "procurement"
    finally:
        run_step.pop_request()
    # ...and a message without it (an older publisher's) names none
    run_step.push_request(**{k: v for k, v in headers.items() if k != FLOW_HEADER})
    try:
        assert flow_named_by(run_step) is None
    finally:
        run_step.pop_request()
