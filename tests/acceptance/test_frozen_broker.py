"""A Redis broker that stops answering without closing its connections (a paused container, a
frozen VM, a partition until TCP gives up) does not hold a publish: it fails after the socket
timeout, the run row stays the outbox, and the caller goes on."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.acceptance.private_services import PrivateRedis
from tests.conftest import worker_env
from tests.services import ROOT
from worker import get_run

# Far above the broker's socket timeout (5 s, a publish retried a few times), far below the
# forever a publish waited before.
CALLER_TIMEOUT = 90


@pytest.fixture()
def frozen_redis(tmp_path: Path) -> Iterator[PrivateRedis]:
    """A Redis of this test's own, stopped (SIGSTOP) once it has accepted connections."""
    server = PrivateRedis(tmp_path).start()
    assert server.proc is not None
    pid = server.proc.pid
    try:
        yield server
    finally:
        os.kill(pid, signal.SIGCONT)
        server.stop()


def test_enqueue_returns_while_the_broker_is_frozen(
    frozen_redis: PrivateRedis, database_url: str, db: str
) -> None:
    # Given a caller whose broker is a Redis that stops answering
    env = worker_env(database_url, INTERLUDE_BROKER_URL=frozen_redis.url(0))
    assert frozen_redis.proc is not None
    os.kill(frozen_redis.proc.pid, signal.SIGSTOP)
    # When it starts a run
    code = "from worker import enqueue_run\nprint(enqueue_run('quick', {}))\n"
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CALLER_TIMEOUT,
    )
    # Then the call returns the run's id: the run is committed, queued for the reaper to
    # publish once the broker answers, and the failed publish is one warning line
    assert done.returncode == 0, done.stderr[-3000:]
    run_id = done.stdout.strip().splitlines()[-1]
    assert get_run(run_id).state == "queued"
    assert "publish failed, the reaper will retry: Timeout" in done.stderr
