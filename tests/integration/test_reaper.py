"""The reaper: expired leases requeued (or failed), lost dispatches republished, once."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select, update

from models import runs as run_store
from models.db import transaction, utcnow
from models.settings import get_settings
from models.tables import Checkpoint, Event, Run
from tests.flows.effects import applied, calls
from tests.services import ROOT, WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_interrupts
from worker.reaper import reap


def _set_fields(session: Any, run_id: str, **fields: Any) -> None:
    """Age a run's lease or dispatch as time would (test set-up, not a lifecycle write)."""
    session.execute(update(Run).where(Run.id == run_id).values(**fields))


def _queued(flow: str = "quick", first_step: str = "only", input: Any = None) -> str:
    """A run committed as queued whose task was never published (a lost publish)."""
    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name=flow,
            flow_version=1,
            input=input or {},
            first_step=first_step,
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        return run.id


def _claimed_by_dead_worker(lost_leases: int = 0) -> str:
    """A run claimed by a worker that died: running, lease already expired."""
    run_id = _queued()
    with transaction() as session:
        assert run_store.claim(session, run_id, owner="dead-worker", lease_seconds=0.01)
        _set_fields(
            session,
            run_id,
            lost_leases=lost_leases,
            lease_expires_at=utcnow() - timedelta(seconds=1),
        )
    return run_id


def _events(run_id: str, trigger: str) -> list[Event]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event)
                .where(Event.run_id == run_id, Event.trigger == trigger)
                .order_by(Event.id)
            ).scalars()
        )


def _run_row(run_id: str) -> Run:
    with transaction(readonly=True) as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def test_expired_lease_is_requeued_and_the_run_finishes(
    db: str, shared_worker: WorkerProcess
) -> None:
    # Given a run whose worker died holding its lease
    run_id = _claimed_by_dead_worker()
    # When the reaper runs
    assert reap() == 1
    # Then the run was requeued by the reaper, counted as a lost lease, and republished
    [requeue] = _events(run_id, "requeue")
    assert (requeue.actor, requeue.from_state, requeue.to_state) == (
        "system:reaper",
        "running",
        "queued",
    )
    assert requeue.detail["owner"] == "dead-worker"
    assert requeue.detail["lost_leases"] == 1
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=30)
    claims = _events(run_id, "claim")
    assert [c.detail["epoch"] for c in claims] == [1, 2]
    assert claims[1].actor != "worker:dead-worker"
    # A finished run is nothing for the reaper
    assert reap() == 0


def test_lease_lost_too_many_times_fails_the_run(db: str) -> None:
    limit = get_settings().max_claims
    run_id = _claimed_by_dead_worker(lost_leases=limit)
    assert reap() == 1
    row = _run_row(run_id)
    assert row.state == "failed"
    assert row.error is not None and row.error.startswith(f"lease lost {limit + 1} times")
    assert row.lease_owner is None
    [fail] = _events(run_id, "fail")
    assert fail.actor == "system:reaper"
    assert reap() == 0


def test_live_lease_is_left_alone(db: str) -> None:
    run_id = _queued()
    with transaction() as session:
        assert run_store.claim(session, run_id, owner="busy-worker", lease_seconds=60)
    assert reap() == 0
    assert _run_row(run_id).state == "running"


def _age_dispatch(run_id: str) -> None:
    """Make the run's last dispatch older than the reaper's threshold."""
    overdue = utcnow() - timedelta(seconds=get_settings().redispatch_after + 1)
    with transaction() as session:
        _set_fields(session, run_id, dispatched_at=overdue)


def test_lost_publish_is_republished_once_and_the_run_finishes(
    db: str, shared_worker: WorkerProcess
) -> None:
    # Given a queued run whose task was lost after commit
    run_id = _queued()
    # Nothing is republished before the threshold
    assert reap() == 0
    # When the reaper runs once the dispatch is overdue, it republishes once
    _age_dispatch(run_id)
    assert reap() == 1
    assert _run_row(run_id).dispatched_at > utcnow() - timedelta(seconds=5)
    assert reap() == 0
    # Then the run is claimed and finishes
    wait_for(lambda: get_run(run_id).state == "succeeded", timeout=30)


def test_run_waiting_for_its_retry_backoff_is_not_republished(db: str) -> None:
    run_id = _queued()
    far = utcnow() + timedelta(hours=1)
    with transaction() as session:
        _set_fields(session, run_id, not_before=far, dispatched_at=utcnow() - timedelta(hours=1))
    assert reap() == 0
    assert reap(now=far + timedelta(seconds=1)) == 1


def _reaper_process(barrier: Path, name: str) -> subprocess.Popen[bytes]:
    # Each reaper loops over small batches until it finds nothing, then prints its total.
    code = (
        "import os, pathlib, sys, time\n"
        "from worker.reaper import reap\n"
        "barrier = pathlib.Path(sys.argv[1])\n"
        "(barrier / sys.argv[2]).touch()\n"
        "while not (barrier / 'go').exists():\n"
        "    time.sleep(0.01)\n"
        "total = 0\n"
        "while (n := reap(batch=3)):\n"
        "    total += n\n"
        "print(total)\n"
    )
    env = dict(os.environ, INTERLUDE_REDISPATCH_AFTER="5")
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
        {
            "schema_version": "resume.v1",
            "run_id": run_id,
            "checkpoint_id": interrupt.checkpoint_id,
            "interrupt_id": interrupt.id,
            "actor": {"type": "human", "id": "approver-2"},
            "decision": "approved",
            "input": {"go": True},
            "scope": interrupt.scope,
            "evidence_hash": interrupt.evidence_hash,
            "idempotency_key": uuid.uuid4().hex,
            "expires_at": (utcnow() + timedelta(hours=1)).isoformat(),
        },
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
