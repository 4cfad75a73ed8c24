"""The Celery beat schedule for interlude: data only (intervals from the settings)."""

from __future__ import annotations

from typing import Any

from models.settings import get_settings

SWEEP_INTERVAL_SECONDS = get_settings().sweep_interval
REAP_INTERVAL_SECONDS = get_settings().reap_interval

beat_schedule: dict[str, dict[str, Any]] = {
    "interlude-sweep-expired": {
        "task": "interlude.sweep_expired",
        "schedule": SWEEP_INTERVAL_SECONDS,
        "options": {"queue": "interlude.maintenance", "expires": SWEEP_INTERVAL_SECONDS},
    },
    "interlude-reap": {
        "task": "interlude.reap",
        "schedule": REAP_INTERVAL_SECONDS,
        "options": {"queue": "interlude.maintenance", "expires": REAP_INTERVAL_SECONDS},
    },
}
