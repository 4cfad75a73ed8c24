"""Waiting runs survive a deployment: two worker generations, v1 only and then v2 only.

Generation 1 (``tests.flows.versions_v1``) starts runs that wait on interrupts; some are
answered while no worker runs. Then generation 2 (``tests.flows.versions_v2``) replaces it:
every process of the test after the switch — worker and ``interlude`` command alike — loads
only version 2. Runs continue through the declared migrations, answers carry over or are
asked again, and the flow that version 2 dropped is refused with a recorded reason.

The test's processes use their own broker database (the test scratch database, flushed per
test): the session's shared worker, which loads other flows, must not take their tasks.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable
from typing import Any

import pytest
from sqlalchemy import select

from models.contracts import InterruptView
from models.db import transaction
from models.tables import Event
from tests.forked import run_interlude
from tests.services import WorkerProcess, wait_for
from worker import add_actor, get_interrupt, get_run

V1 = "tests.flows.versions_v1"
V2 = "tests.flows.versions_v2"
pytestmark = pytest.mark.slow


def _broker() -> str:
    return os.environ["INTERLUDE_TEST_REDIS"]


def _cli(
    db: str, flows: str, *args: str, token: str | None = None
) -> subprocess.CompletedProcess[str]:
    from tests.conftest import worker_env

    env = worker_env(db, INTERLUDE_FLOWS=flows, INTERLUDE_BROKER_URL=_broker())
    env.pop("INTERLUDE_ACTOR_TOKEN", None)
    if token is not None:
        env["INTERLUDE_ACTOR_TOKEN"] = token
    return run_interlude(args, env=env)


def _start(db: str, flow: str, payload: dict[str, Any]) -> str:
    done = _cli(db, V1, "runs", "start", flow, "--input", json.dumps(payload), "--json")
    assert done.returncode == 0, done.stderr
    run_id: str = json.loads(done.stdout)["id"]
    return run_id


def _waiting_on(run_id: str, name: str) -> InterruptView:
    def found() -> InterruptView | None:
        run = get_run(run_id)
        matches = [i for i in run.pending_interrupts if i.name == name]
        return matches[0] if run.state == "waiting" and matches else None

    interrupt: InterruptView = wait_for(found, timeout=60)
    return interrupt


def _state(run_id: str, state: str) -> Any:
    return wait_for(lambda: get_run(run_id) if get_run(run_id).state == state else None, 60)


def _events(run_id: str) -> list[tuple[str, Any]]:
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(Event.trigger, Event.detail).where(Event.run_id == run_id).order_by(Event.id)
        ).all()
    return [(str(t), d) for t, d in rows]


def _resume(
    db: str, flows: str, interrupt_id: str, token: str, payload: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    return _cli(
        db,
        flows,
        "resume",
        interrupt_id,
        "--actor",
        "alice",
        "--decision",
        "approved",
        "--input",
        json.dumps(payload),
        "--yes",
        token=token,
    )


def test_runs_waiting_across_a_deployment_continue_on_the_new_version(
    db: str, start_worker: Callable[..., WorkerProcess]
) -> None:
    alice = add_actor("alice", ["approver"])
    # Given generation 1: a worker with version 1 only, and runs waiting on their interrupts
    gen1 = start_worker(INTERLUDE_FLOWS=V1, INTERLUDE_BROKER_URL=_broker())
    waiting = _start(db, "ver_carry", {"amount": 12.5})
    answered = _start(db, "ver_carry", {"amount": 3})
    repriced = _start(db, "ver_carry", {"amount": 4, "repriced": True})
    reworded = _start(db, "ver_reworded", {})
    orphan = _start(db, "ver_orphan", {})
    asked = {run: _waiting_on(run, "approval") for run in (waiting, answered, repriced, reworded)}
    orphan_ack = _waiting_on(orphan, "ack")
    # And two runs answered under generation 1 while no worker runs (left resuming)
    gen1.stop()
    for run in (answered, repriced):
        done = _resume(db, V1, asked[run].id, alice, {"comment": f"ok {run[:4]}"})
        assert done.returncode == 0, done.stderr
        assert get_run(run).state == "resuming"

    # When an operator checks before deploying generation 2 (version 2 only)
    check = _cli(db, V2, "flows", "check")
    listing = json.loads(_cli(db, V2, "flows", "list", "--json").stdout)
    # Then the check fails naming the version nothing there can continue, and the listing
    # shows which versions still have runs in which state
    assert check.returncode == 1
    assert "flow 'ver_orphan' version 1 has 1 unfinished runs (1 waiting)" in check.stderr
    assert "ver_carry" not in check.stderr and "ver_reworded" not in check.stderr
    rows = {(r["flow"], r["version"]): r for r in listing}
    assert rows[("ver_carry", 1)]["status"] == "migrates to v2"
    assert rows[("ver_carry", 1)]["runs"] == {
        "queued": 0,
        "running": 0,
        "waiting": 1,
        "resuming": 2,
    }
    assert rows[("ver_carry", 2)]["registered"] is True
    assert rows[("ver_orphan", 1)]["stranded"] is True

    # When generation 2 runs
    start_worker(INTERLUDE_FLOWS=V2, INTERLUDE_BROKER_URL=_broker())

    # Then a waiting run is resumed by a process that has only version 2 (the schema is
    # registered there), migrates, and finishes on version 2 with the answer
    done = _resume(db, V2, asked[waiting].id, alice, {"comment": "after the switch"})
    assert done.returncode == 0, done.stderr + done.stdout
    finished = _state(waiting, "succeeded")
    assert finished.flow_version == 2
    assert finished.output == {
        "amount_cents": 1250,
        "migrated": True,
        "comment": "after the switch",
        "approved_by": "alice",
        "finished_on": 2,
    }
    # And a run answered on version 1 carries its answer over to version 2
    carried = _state(answered, "succeeded")
    assert (carried.flow_version, carried.output["comment"]) == (2, f"ok {answered[:4]}")
    triggers = [t for t, _ in _events(answered)]
    assert triggers.index("migrate") < triggers.index("answer_carried") < triggers.index("complete")

    # And a run whose evidence version 2 revalidates differently waits on a renewed review,
    # bound to version 2, with the old answer kept
    renewed = _waiting_on(repriced, "approval")
    assert (renewed.flow_version, renewed.evidence) == (2, {"amount": 5.0})
    assert renewed.previous_input == {"comment": f"ok {repriced[:4]}"}
    assert renewed.supersedes == asked[repriced].id
    assert "review_renewed" in [t for t, _ in _events(repriced)]
    assert _resume(db, V2, renewed.id, alice, {"comment": "again"}).returncode == 0
    assert _state(repriced, "succeeded").output["comment"] == "again"

    # And a run whose version 2 asks another interrupt gets a renewed review for it
    done = _resume(db, V2, asked[reworded].id, alice, {"comment": "fine"})
    assert done.returncode == 0, done.stderr
    sign_off = _waiting_on(reworded, "sign_off")
    assert (sign_off.flow_version, sign_off.schema_id) == (2, "ver-signoff.v1")
    assert sign_off.previous_input == {"comment": "fine"}
    assert sign_off.supersedes is not None
    assert get_interrupt(sign_off.supersedes).resume_input == {"comment": "fine"}
    assert _resume(db, V2, sign_off.id, alice, {"signer": "alice"}).returncode == 0
    assert _state(reworded, "succeeded").output["signer"] == "alice"

    # And the flow version 2 dropped: its schema is registered nowhere here (refused, exit 17,
    # recorded), and a worker refuses to run it, with the reason recorded once
    refused = _resume(db, V2, orphan_ack.id, alice, {})
    assert refused.returncode == 17, refused.stderr + refused.stdout
    assert (
        "ver-orphan.v1 is registered by none of the flows loaded here"
        in refused.stderr + refused.stdout
    )
    assert "worker" not in refused.stderr + refused.stdout
    assert _resume(db, V1, orphan_ack.id, alice, {}).returncode == 0
    reasons = wait_for(lambda: [d for t, d in _events(orphan) if t == "refused"], 60)
    assert "ver_orphan" in reasons[0]
    assert get_run(orphan).state == "resuming"
    assert _cli(db, V2, "flows", "check").returncode == 1
