"""Beat's scheduler: Celery's own, which also says it is alive for a healthcheck.

Beat answers no remote control (``celery inspect ping`` reaches workers only), so its health
is shown by a file: ``<schedule file>.alive`` is touched at every tick of the scheduler, which
comes at least every ``worker.app.MAX_TICK_SECONDS`` (``beat_max_loop_interval``). A beat
stopped, hung or frozen leaves it to age; docker-compose.yml's healthcheck reads its age.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from celery.beat import PersistentScheduler

ALIVE_SUFFIX = ".alive"


class Scheduler(PersistentScheduler):  # type: ignore[misc]
    """``PersistentScheduler`` touching ``<schedule file>.alive`` at every tick."""

    def tick(self, *args: Any, **kwargs: Any) -> float:
        Path(str(self.schedule_filename) + ALIVE_SUFFIX).touch()
        interval: float = super().tick(*args, **kwargs)
        return interval
