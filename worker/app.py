"""The Celery app: JSON only, late acks, prefetch 1, task events on, stable names and queues."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from celery import Celery
from kombu import Exchange, Queue  # type: ignore[attr-defined]
from kombu.transport import TRANSPORT_ALIASES

from models.errors import ConfigurationError
from models.settings import NOTIFY_HARD_LIMIT_GRACE, Settings, get_settings
from worker.engine.broker_options import broker_options
from worker.engine.tasknames import (
    QUEUE_MAINTENANCE,
    QUEUE_NOTIFY,
    QUEUE_RESUMES,
    QUEUE_STEPS,
    TASK_NOTIFY,
    TASK_REAP,
    TASK_RESUME,
    TASK_STEP,
    TASK_SWEEP,
)
from worker.ops.flower_guard import guard_flower, is_flower_command
from worker.startup import refuse, under_celery_command

# Beat ticks at least this often (worker.ops.beat_scheduler touches its alive file at every tick).
MAX_TICK_SECONDS = 30.0


# kombu finds the transport of a URL's scheme in this table: ``redis://`` and ``rediss://`` get
# kombu's Redis transport with one command client per channel (worker/engine/redis_transport.py).
# A "module:Class" path, imported only when a connection needs it, so the filesystem default
# never loads redis; URLs and Flower still see the scheme "redis".
REDIS_TRANSPORT = "worker.engine.redis_transport:Transport"
TRANSPORT_ALIASES.update(redis=REDIS_TRANSPORT, rediss=REDIS_TRANSPORT)


def broker_url(settings: Settings) -> str:
    """The broker URL Celery is given: the setting, with a host for the filesystem transport.

    That transport has no host (nor uses the rest of the URL: its folders are options), and
    kombu warns on every connection without one ("No hostname was supplied"), on the stderr
    of commands whose --json output is read.
    """
    url = settings.broker_url
    if url.startswith("filesystem://") and not urlsplit(url).hostname:
        return "filesystem://localhost/"
    return url


def _queue(name: str) -> Queue:
    return Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]


def create_app(settings: Settings | None = None) -> Celery:
    settings = settings or get_settings()
    celery = Celery("interlude", set_as_current=True)
    celery.conf.update(
        broker_url=broker_url(settings),
        broker_transport_options=broker_options(settings),
        broker_connection_retry_on_startup=True,
        # RabbitMQ closes the channel of a worker that holds a delivery past its
        # consumer_timeout (a long step, a retry's countdown). Without this, Celery takes that
        # channel error for unrecoverable and the whole worker exits; with it, it reconnects.
        broker_channel_error_retry=True,
        # And a lost connection must not cancel running steps (Celery 6 would by default):
        # each step's lease, not its message, says who owns its run.
        worker_cancel_long_running_tasks_on_connection_loss=False,
        result_backend=None,
        task_ignore_result=True,
        # One (disabled) result backend for all of a threads-pool worker's threads. Otherwise
        # each thread builds its own on its first task, and building one scans every installed
        # package's entry points: about 5 ms with the GIL held, so the 50 threads of
        # ``-P threads -c 50`` held up their first tasks by some 0.25 s. It keeps no state.
        result_backend_thread_safe=True,
        task_serializer="json",
        result_serializer="json",
        accept_content=["json"],
        event_serializer="json",
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        # On by default (Flower shows tasks from them); off saves a publish per task event
        # when nothing watches, and Flower still turns the worker's on when it starts.
        worker_send_task_events=settings.task_events,
        task_send_sent_event=settings.task_events,
        worker_hijack_root_logger=False,
        # Each queue gets its own exchange and routing key: queues declared by name alone all
        # bind to the default exchange under one key, and every publish would reach all of them.
        # A worker started without -Q consumes every queue listed here, notifications included:
        # nothing waits in a queue nobody takes. (QUEUE_NOTIFY: worker.engine.tasknames says why.)
        task_queues=[
            _queue(q) for q in (QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE, QUEUE_NOTIFY)
        ],
        task_default_queue=QUEUE_STEPS,
        task_routes={
            TASK_STEP: {"queue": QUEUE_STEPS},
            TASK_RESUME: {"queue": QUEUE_RESUMES},
            TASK_SWEEP: {"queue": QUEUE_MAINTENANCE},
            TASK_REAP: {"queue": QUEUE_MAINTENANCE},
            TASK_NOTIFY: {"queue": QUEUE_NOTIFY},
        },
        # A notifier's call is bounded where the pool enforces Celery's time limits: prefork
        # raises SoftTimeLimitExceeded in it (retried like any failure), then kills the child at
        # the hard limit; gevent has the hard limit only; threads, solo and eventlet none.
        task_annotations={
            TASK_NOTIFY: {
                "soft_time_limit": settings.notify_timeout_seconds,
                "time_limit": settings.notify_timeout_seconds + NOTIFY_HARD_LIMIT_GRACE,
            }
        },
        imports=["worker.engine.tasks"],
        beat_schedule=_beat_schedule(),
        # Beat's scheduler touches a file at every tick, at least every 30 s: its healthcheck.
        beat_scheduler="worker.ops.beat_scheduler:Scheduler",
        beat_max_loop_interval=MAX_TICK_SECONDS,
        timezone="UTC",
    )
    return celery


def _beat_schedule() -> dict[str, Any]:
    from beat_schedule import beat_schedule

    return beat_schedule


def _create_or_refuse() -> Celery:
    try:
        return create_app()
    except ConfigurationError as exc:
        refuse(exc)


app = _create_or_refuse()
if under_celery_command() and is_flower_command():
    guard_flower()
