"""A Redis restart under a busy worker leaves no kombu "EMERGENCY DUMP STATE" file behind.

When its broker connection drops, the worker closes the channel, and kombu's Redis transport
then tries to put the messages it still holds back on their queues over the connection that
just failed; what it cannot restore it pickles to a file in the temporary folder, which nothing
ever reads. The worker's TMPDIR is the test's own, so any such file is seen.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from sqlalchemy import create_engine, func, select

from models.tables import Run
from tests.acceptance.private_services import PrivateRedis
from tests.services import ROOT, WorkerProcess, wait_for

RUNS = 20
STEP_SECONDS = 0.5
# Short leases and a quick reaper: the messages the restart lost are republished in seconds.
RECOVERY_ENV = {
    "INTERLUDE_LEASE_SECONDS": "5",
    "INTERLUDE_REDISPATCH_AFTER": "4",
    "INTERLUDE_REAP_INTERVAL": "0.5",
}


def _enqueue(env: dict[str, str], count: int) -> list[str]:
    code = (
        "import json, sys\n"
        "from worker import enqueue_run\n"
        "n, sleep = int(sys.argv[1]), float(sys.argv[2])\n"
        "print(json.dumps([enqueue_run('effect_steady', {'sleep': sleep}) for _ in range(n)]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(count), str(STEP_SECONDS)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    run_ids: list[str] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return run_ids


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
        run_ids = _enqueue(dict(os.environ, **env), RUNS)
        engine = create_engine(db)

        def succeeded() -> int:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        select(func.count())
                        .select_from(Run)
                        .where(Run.id.in_(run_ids), Run.state == "succeeded")
                    ).scalar_one()
                )

        def running() -> int:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        select(func.count())
                        .select_from(Run)
                        .where(Run.id.in_(run_ids), Run.state == "running")
                    ).scalar_one()
                )

        try:
            # When Redis restarts while the worker holds tasks (steps running, one prefetched)
            wait_for(lambda: running() >= 1, timeout=60)
            redis_server.stop()
            time.sleep(2.0)
            redis_server.start()
            # Then every run still finishes
            wait_for(lambda: succeeded() == RUNS, timeout=120, interval=0.5)
        finally:
            engine.dispose()
        # And the worker wrote no emergency dump of the messages it held
        assert "EMERGENCY DUMP" not in worker.output()
        assert _dumps(worker_tmp) == []
        assert worker.proc is not None and worker.proc.poll() is None
        assert beat.proc is not None and beat.proc.poll() is None
    finally:
        redis_server.stop()
