"""The Celery app's configuration: what DESIGN promises about it, checked without a broker."""

from __future__ import annotations

from worker import app
from worker.app import QUEUE_MAINTENANCE, QUEUE_RESUMES, QUEUE_STEPS


def test_json_only_late_acks_prefetch_one_and_events() -> None:
    conf = app.conf
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert conf.result_serializer == "json"
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True


def test_each_task_has_a_stable_name_and_its_own_queue() -> None:
    routes = app.conf.task_routes
    assert routes["interlude.run_step"] == {"queue": QUEUE_STEPS}
    assert routes["interlude.resume_run"] == {"queue": QUEUE_RESUMES}
    assert routes["interlude.sweep_expired"] == {"queue": QUEUE_MAINTENANCE}
    assert routes["interlude.reap"] == {"queue": QUEUE_MAINTENANCE}
    assert {"interlude.run_step", "interlude.resume_run"} <= set(app.tasks)


def test_a_message_for_one_queue_cannot_reach_another() -> None:
    # Queues that share an exchange and routing key all receive every message published to it.
    bindings = {(q.exchange.name, q.routing_key) for q in app.amqp.queues.values()}
    assert len(bindings) == len(app.amqp.queues) == 3
