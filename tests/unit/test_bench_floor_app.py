"""The benches' floors run Celery alone configured as interlude's worker is: a floor that pays
for a setting interlude does not use overstates what no change of interlude's code can save."""

from __future__ import annotations

import pytest

from bench.processes import BROKER_URL, floor_app
from models.settings import Settings, reset_settings
from worker import app as interlude
from worker.app import create_app

# Everything of the app's configuration that changes what a task's hop costs: the broker's
# transport and its options, acknowledgement and prefetch, task events, results, serializers.
HOP = (
    "broker_transport_options",
    "task_acks_late",
    "task_reject_on_worker_lost",
    "worker_prefetch_multiplier",
    "worker_send_task_events",
    "task_send_sent_event",
    "task_ignore_result",
    "result_backend_thread_safe",
    "task_serializer",
    "accept_content",
    "event_serializer",
)


@pytest.mark.parametrize("events", ["false", "true"])
def test_a_floor_is_configured_as_interlude_is_for_the_hop(
    monkeypatch: pytest.MonkeyPatch, events: str
) -> None:
    # Given interlude's app and a floor's on the same Redis, task events on or off
    monkeypatch.setenv("BENCH_BROKER_URL", BROKER_URL)
    monkeypatch.setenv("INTERLUDE_TASK_EVENTS", events)
    reset_settings()
    ours = create_app(Settings(broker_url=BROKER_URL))
    floor = floor_app("floor_config", "floor_config")
    interlude.set_current()  # (creating an app makes it the current one)
    reset_settings()
    # Then every setting of the hop is the same (no acknowledgement emulation on either)
    assert {key: floor.conf[key] for key in HOP} == {key: ours.conf[key] for key in HOP}
    assert floor.conf.broker_transport_options["ack_emulation"] is False
    # And both take Redis through interlude's transport
    assert floor.conf.broker_transport == "worker.engine.redis_transport:Transport"
