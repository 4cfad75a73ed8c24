"""interlude's Celery app for ``bench.w2``: ``celery -A bench.w2_app worker``.

W2 times each sweep and reaper pass from Celery's own "succeeded in …s" line in the worker's
log. A pass that found nothing to do logs that line at DEBUG (``worker.ops.runlog``'s
``QuietMaintenance``), which a worker started with ``-l info`` drops: here Celery's tracer
logs at DEBUG, so the line is kept, and nothing else changes.
"""

from __future__ import annotations

import logging
from typing import Any

from celery import signals

from worker import app


@signals.after_setup_logger.connect
def _keep_quiet_lines(**_: Any) -> None:
    logging.getLogger("celery.app.trace").setLevel(logging.DEBUG)


__all__ = ["app"]
