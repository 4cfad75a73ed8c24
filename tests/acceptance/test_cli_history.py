"""``interlude runs steps``, ``runs result`` and ``runs fork`` against a real worker."""

from __future__ import annotations

import json
import os
import subprocess

from tests.conftest import worker_env
from tests.flows.history import shipments
from tests.forked import run_interlude
from tests.resumes import wait_finished
from tests.services import WorkerProcess
from worker import add_actor, enqueue_run


def _cli(database_url: str, *args: str, token: str = "") -> subprocess.CompletedProcess[str]:
    env = {**os.environ, **worker_env(database_url), "INTERLUDE_ACTOR_TOKEN": token}
    return run_interlude(args, env=env, timeout=60)


def test_steps_result_and_fork_from_the_command_line(
    db: str, database_url: str, shared_worker: WorkerProcess
) -> None:
    ops = add_actor("ops", ["operator"])
    run_id = enqueue_run("shipping", {"order": "c-1"})
    assert wait_finished(run_id) == "succeeded"
    steps = _cli(database_url, "--json", "runs", "steps", run_id)
    assert steps.returncode == 0, steps.stderr
    assert [s["step"] for s in json.loads(steps.stdout)] == ["pack", "send", "close"]
    result = _cli(database_url, "--json", "runs", "result", run_id)
    assert result.returncode == 0 and json.loads(result.stdout)["output"]["closed"] is True
    fork = _cli(
        database_url,
        "--json",
        "runs",
        "fork",
        run_id,
        "--from-step",
        "send",
        "--actor",
        "ops",
        token=ops,
    )
    assert fork.returncode == 0, fork.stderr
    fork_id = json.loads(fork.stdout)["id"]
    assert wait_finished(fork_id) == "succeeded"
    assert shipments("c-1") == 1
    denied = _cli(
        database_url, "runs", "fork", run_id, "--from-step", "send", "--actor", "ops", token="x"
    )
    assert denied.returncode == 11, denied.stderr
