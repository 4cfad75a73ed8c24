"""The Celery app's configuration: what DESIGN promises about it, checked without a broker."""

from __future__ import annotations

import pytest

from models.errors import ConfigurationError
from models.settings import Settings, get_settings, reset_settings
from worker import app
from worker.app import create_app
from worker.engine import dispatch
from worker.engine.broker_options import BROKER_SOCKET_TIMEOUT, broker_options
from worker.engine.tasknames import QUEUE_MAINTENANCE, QUEUE_NOTIFY, QUEUE_RESUMES, QUEUE_STEPS


def test_json_only_late_acks_prefetch_one_and_no_task_events() -> None:
    conf = app.conf
    assert conf.accept_content == ["json"]
    assert conf.task_serializer == "json"
    assert conf.result_serializer == "json"
    assert conf.task_acks_late is True
    assert conf.task_reject_on_worker_lost is True
    assert conf.worker_prefetch_multiplier == 1
    # Off by default, as in Celery (Flower turns a worker's on while it watches).
    assert conf.worker_send_task_events is False
    assert conf.task_send_sent_event is False


def test_task_events_can_be_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given INTERLUDE_TASK_EVENTS=true, When the app is configured, Then the worker and every
    # publisher send task events
    monkeypatch.setenv("INTERLUDE_TASK_EVENTS", "true")
    other = create_app(Settings())
    app.set_current()  # (creating an app makes it the current one)
    conf = other.conf
    assert conf.worker_send_task_events is True
    assert conf.task_send_sent_event is True
    # ...and a value that is not a boolean is refused in one line naming the variable
    monkeypatch.setenv("INTERLUDE_TASK_EVENTS", "sometimes")
    reset_settings()
    with pytest.raises(ConfigurationError, match="INTERLUDE_TASK_EVENTS='sometimes'"):
        get_settings()
    reset_settings()


def test_each_task_has_a_stable_name_and_its_own_queue() -> None:
    routes = app.conf.task_routes
    assert routes["interlude.run_step"] == {"queue": QUEUE_STEPS}
    assert routes["interlude.resume_run"] == {"queue": QUEUE_RESUMES}
    assert routes["interlude.sweep_expired"] == {"queue": QUEUE_MAINTENANCE}
    assert routes["interlude.reap"] == {"queue": QUEUE_MAINTENANCE}
    assert routes["interlude.notify"] == {"queue": QUEUE_NOTIFY}
    assert {"interlude.run_step", "interlude.resume_run", "interlude.notify"} <= set(app.tasks)


def test_a_notifier_call_has_the_time_limits_of_the_settings(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The default: 30 s soft (SoftTimeLimitExceeded in the call), the child killed 10 s later
    task = app.tasks["interlude.notify"]
    assert (task.soft_time_limit, task.time_limit) == (30.0, 40.0)
    # ... and a pool child killed there does not get the task again (nothing would bound that)
    assert task.reject_on_worker_lost is False
    # Given INTERLUDE_NOTIFY_TIMEOUT_SECONDS, When the app is configured, Then it sets them
    monkeypatch.setenv("INTERLUDE_NOTIFY_TIMEOUT_SECONDS", "2.5")
    other = create_app(Settings())
    app.set_current()
    assert other.conf.task_annotations["interlude.notify"] == {
        "soft_time_limit": 2.5,
        "time_limit": 12.5,
    }


def test_a_message_for_one_queue_cannot_reach_another() -> None:
    # Queues that share an exchange and routing key all receive every message published to it.
    bindings = {(q.exchange.name, q.routing_key) for q in app.amqp.queues.values()}
    assert len(bindings) == len(app.amqp.queues) == 4


def test_redis_urls_get_interludes_transport_and_other_brokers_keep_kombus() -> None:
    # Resolving a URL's transport connects to nothing.
    from kombu import Connection

    from worker.engine.redis_transport import Transport

    for url in ("redis://127.0.0.1:6379/0", "rediss://127.0.0.1:6380/0"):
        conn = Connection(url)  # type: ignore[no-untyped-call]
        assert type(conn.transport) is Transport, url
        assert conn.as_uri().split("://")[0] == url.split("://")[0]
    assert type(Connection("amqp://guest@127.0.0.1//").transport).__module__ == (  # type: ignore[no-untyped-call]
        "kombu.transport.pyamqp"
    )
    assert type(Connection("memory://").transport).__module__ == "kombu.transport.memory"  # type: ignore[no-untyped-call]


def test_a_threads_pool_worker_builds_its_result_backend_once() -> None:
    # Building one scans the installed packages' entry points: once per process, not once
    # per pool thread.
    from concurrent.futures import ThreadPoolExecutor

    assert app.conf.result_backend_thread_safe is True
    backend = app.backend
    with ThreadPoolExecutor(max_workers=2) as threads:
        assert all(b is backend for b in threads.map(lambda _: app.backend, range(4)))


def test_a_broker_channel_error_reconnects_and_cancels_no_step() -> None:
    # RabbitMQ closes the channel of a worker holding a delivery past its consumer_timeout (a
    # long step): Celery's default takes that for unrecoverable, and the whole worker exits.
    assert app.conf.broker_channel_error_retry is True
    # and a lost connection leaves running steps alone (each step's lease says who owns it)
    assert app.conf.worker_cancel_long_running_tasks_on_connection_loss is False


def test_redis_publishes_time_out_and_transport_options_can_be_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a Redis broker, the publishes of every process fail after a socket timeout
    # rather than wait for a broker that stopped answering, for as long as it does
    monkeypatch.setenv("INTERLUDE_BROKER_URL", "redis://127.0.0.1:6379/0")
    options = broker_options(Settings())
    assert options == {
        "ack_emulation": False,
        "socket_timeout": BROKER_SOCKET_TIMEOUT,
        "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
        "socket_keepalive": True,
    }
    # And INTERLUDE_BROKER_TRANSPORT_OPTIONS (a JSON object) goes over them, as given
    monkeypatch.setenv(
        "INTERLUDE_BROKER_TRANSPORT_OPTIONS", '{"master_name": "main", "socket_timeout": 9}'
    )
    options = broker_options(Settings())
    assert (options["master_name"], options["socket_timeout"]) == ("main", 9)
    assert options["ack_emulation"] is False
    # And a value that is not a JSON object is refused in one line that does not echo it
    for bad in ('{"password": "s3cret"', '["s3cret"]'):
        monkeypatch.setenv("INTERLUDE_BROKER_TRANSPORT_OPTIONS", bad)
        reset_settings()
        with pytest.raises(ConfigurationError) as refused:
            get_settings()
        assert str(refused.value).startswith(
            "configuration is invalid: INTERLUDE_BROKER_TRANSPORT_OPTIONS: "
        )
        assert "s3cret" not in str(refused.value)
    monkeypatch.delenv("INTERLUDE_BROKER_TRANSPORT_OPTIONS")
    reset_settings()


@pytest.mark.parametrize(
    ("url", "declares"),
    [("redis://127.0.0.1:6379/0", False), ("amqp://guest:guest@127.0.0.1:5672//", True)],
)
def test_a_publish_declares_its_queue_where_the_broker_needs_it(
    monkeypatch: pytest.MonkeyPatch, url: str, declares: bool
) -> None:
    # Given an app on RabbitMQ, a task sent to a queue not declared yet would be dropped: its
    # publishes declare the queue (Celery's default). On Redis the push makes the queue's
    # list, and a publish skips the declaration, which cost a sixth of it.
    monkeypatch.setenv("INTERLUDE_BROKER_URL", url)
    other = create_app(Settings())
    app.set_current()
    assert dispatch.declaring(other) == ({} if declares else {"declare": []})
    # ...and an app pointed at the other broker later decides again (the tests do that)
    other.conf.broker_url = "redis://127.0.0.1:6379/1" if declares else "amqp://127.0.0.1//"
    other._pool = other.amqp._producer_pool = None
    assert dispatch.declaring(other) == ({"declare": []} if declares else {})
