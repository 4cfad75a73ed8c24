"""The reaper across processes: two reaper processes at once, and a resume accepted by a
process whose broker is down, continued by a real worker once the reaper republishes it."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from models.db import transaction, utcnow
from models.tables import Checkpoint, Run
from tests.flows.effects import applied, calls
from tests.integration.test_reaper import _age_dispatch, _claimed_by_dead_worker, _events, _queued
from tests.services import ROOT, WorkerProcess, wait_for
from worker import ResumeContract, add_actor, enqueue_run, get_run, list_interrupts
from worker.engine.reaper import reap


def _reaper_process(barrier: Path, name: str) -> subprocess.Popen[bytes]:
    # Each reaper loops over small batches until it finds nothing, then prints its total.
    code = (
        "import os, pathlib, sys, time\n"
        "from worker.engine.reaper import reap\n"
        "barrier = pathlib.Path(sys.argv[1])\n"
        "(barrier / sys.argv[2]).touch()\n"
        "while not (barrier / 'go').exists():\n"
        "    time.sleep(0.01)\n"
        "total = 0\n"
        "while (n := reap(batch=3)):\n"
        "    total += n\n"
        "print(total)\n"
    )
    # The lost runs were dispatched a minute ago, so they are due; a run requeued here is not
    # due again for 30 s, however long the worker takes to claim it while the reapers loop
    # (with 5 s, a slow machine saw a requeued run republished by the second pass).
    env = dict(os.environ, INTERLUDE_REDISPATCH_AFTER="30")
    return subprocess.Popen(
        [sys.executable, "-c", code, str(barrier), name],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )


def test_two_reapers_at_once_handle_each_run_once(
    db: str, shared_worker: WorkerProcess, tmp_path: Path
) -> None:
    # Given runs with expired leases and runs whose publish was lost a minute ago
    expired = [_claimed_by_dead_worker() for _ in range(12)]
    lost = [_queued() for _ in range(12)]
    with transaction() as session:
        session.execute(
            update(Run)
            .where(Run.id.in_(lost))
            .values(dispatched_at=utcnow() - timedelta(minutes=1))
        )
    # When two reaper processes start at the same moment
    reapers = [_reaper_process(tmp_path, name) for name in ("a", "b")]
    wait_for(lambda: (tmp_path / "a").exists() and (tmp_path / "b").exists(), timeout=60)
    (tmp_path / "go").touch()
    totals = []
    for process in reapers:
        out, err = process.communicate(timeout=60)
        assert process.returncode == 0, err.decode()
        totals.append(int(out.decode().split()[-1]))
    # Then between them each run was requeued or republished exactly once
    assert sum(totals) == len(expired) + len(lost), totals
    for run_id in expired:
        assert len(_events(run_id, "requeue")) == 1
    # And every run finishes
    everything = expired + lost
    wait_for(lambda: all(get_run(run_id).state == "succeeded" for run_id in everything), timeout=60)


def _dead_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _accept_without_broker(contract: dict[str, Any], credential: str) -> dict[str, Any]:
    """Accept a resume in a process whose broker cannot be reached: commit, then no publish."""
    code = (
        "import json, sys\n"
        "from worker import submit_resume\n"
        "data = json.loads(sys.stdin.read())\n"
        "result = submit_resume(data['contract'], data['credential'])\n"
        "print(json.dumps(result.model_dump(mode='json')))\n"
    )
    env = dict(os.environ, INTERLUDE_BROKER_URL=f"redis://127.0.0.1:{_dead_port()}/0")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        input=json.dumps({"contract": contract, "credential": credential}).encode(),
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    assert b"publish failed" in done.stderr, done.stderr.decode()[-3000:]
    result: dict[str, Any] = json.loads(done.stdout.decode().strip().splitlines()[-1])
    return result


def test_resume_lost_between_acceptance_and_dispatch_continues_once(
    db: str, shared_worker: WorkerProcess
) -> None:
    credential = add_actor("approver-2", ["approver"])
    # Given a run waiting for approval after its effect
    run_id = enqueue_run("effect_then_interrupt", {})
    wait_for(lambda: get_run(run_id).state == "waiting", timeout=30)
    [interrupt] = list_interrupts(run_id=run_id, status="pending")
    # When the resume is accepted but its task is never published
    result = _accept_without_broker(
        ResumeContract.for_interrupt(
            interrupt, actor="approver-2", decision="approved", input={"go": True}
        ).model_dump(mode="json"),
        credential,
    )
    assert result["outcome"] == "accepted"
    # Then the run sits in resuming with nobody to claim it
    assert get_run(run_id).state == "resuming"
    assert len(_events(run_id, "claim")) == 1
    # And the reaper, once the dispatch is overdue, republishes it to the resume queue
    _age_dispatch(run_id)
    assert reap() == 1
    assert reap() == 0
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=30)
    # And the run continued exactly once: one claim after acceptance, one more checkpoint,
    # its effect still applied once
    run = get_run(run_id)
    assert run.output["decision"] == "approved"
    claims = _events(run_id, "claim")
    assert [(c.from_state, c.detail["epoch"]) for c in claims] == [("queued", 1), ("resuming", 2)]
    with transaction(readonly=True) as session:
        seqs = list(
            session.execute(
                select(Checkpoint.seq).where(Checkpoint.run_id == run_id).order_by(Checkpoint.seq)
            ).scalars()
        )
    assert seqs == [0, 1]
    assert (calls(run_id), applied(run_id)) == (1, 1)
