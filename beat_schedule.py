"""The Celery beat schedule for interlude: data only (intervals from the environment)."""

from __future__ import annotations

import os
from typing import Any

SWEEP_INTERVAL_SECONDS = float(os.environ.get("INTERLUDE_SWEEP_INTERVAL", "5"))
REAP_INTERVAL_SECONDS = float(os.environ.get("INTERLUDE_REAP_INTERVAL", "10"))

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
