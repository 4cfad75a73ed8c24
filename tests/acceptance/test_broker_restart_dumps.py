"""A Redis restart under a busy worker leaves no kombu "EMERGENCY DUMP STATE" file behind.

When its broker connection drops, the worker closes the channel, and kombu's Redis transport
then tries to put the messages it still holds back on their queues over the connection that
just failed; what it cannot restore it pickles to a file in the temporary folder, which nothing
ever reads. The worker's TMPDIR is the test's own, so any such file is seen.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine

from tests.acceptance.private_services import PrivateRedis
from tests.services import WorkerProcess, enqueue_elsewhere, runs_in_state, wait_for

RUNS = 20
STEP_SECONDS = 0.5
# Short leases and a quick reaper: the messages the restart lost are republished in seconds.
RECOVERY_ENV = {
    "INTERLUDE_LEASE_SECONDS": "5",
    "INTERLUDE_REDISPATCH_AFTER": "4",
    "INTERLUDE_REAP_INTERVAL": "0.5",
}


def _dumps(folder: Path) -> list[str]:
    """Files in ``folder`` that kombu's emergency dump wrote (a pickle of message state)."""
    found = []
    for path in folder.iterdir():
        if path.is_file() and path.name.startswith("tmp"):
            found.append(f"{path.name}: {path.read_bytes()[:80]!r}")
    return found


def test_a_redis_restart_under_a_busy_worker_leaves_no_emergency_dump(
    db: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # Given a worker (TMPDIR of the test's own) and beat on a private Redis, with runs in hand
    redis_server = PrivateRedis(tmp_path).start()
    worker_tmp = tmp_path / "worker-tmp"
    worker_tmp.mkdir()
    env = {"INTERLUDE_BROKER_URL": redis_server.url(), **RECOVERY_ENV}
    try:
        worker = start_worker("-c", "2", TMPDIR=str(worker_tmp), **env)
        beat = start_worker("-s", str(tmp_path / "beat-schedule"), kind="beat", **env)
        run_ids = enqueue_elsewhere(dict(os.environ, **env), RUNS, STEP_SECONDS)
        engine = create_engine(db)
        try:
            # When Redis restarts while the worker holds tasks (steps running, one prefetched)
            wait_for(lambda: runs_in_state(engine, run_ids, "running") >= 1, timeout=60)
            redis_server.stop()
            time.sleep(2.0)
            redis_server.start()
            # Then every run still finishes
            wait_for(
                lambda: runs_in_state(engine, run_ids, "succeeded") == RUNS,
                timeout=120,
                interval=0.5,
            )
        finally:
            engine.dispose()
        # And the worker wrote no emergency dump of the messages it held
        assert "EMERGENCY DUMP" not in worker.output()
        assert _dumps(worker_tmp) == []
        assert worker.proc is not None and worker.proc.poll() is None
        assert beat.proc is not None and beat.proc.poll() is None
    finally:
        redis_server.stop()
