"""Workers SIGKILLed at every point of an effect: the outside world sees it exactly once.

Each run's worker process is killed the first time the run reaches the crash point (a pool
child killing itself, as the OOM killer would); the real ``celery beat`` schedules our reaper
every half second, which requeues the run once its two-second lease has expired, and another
process finishes it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from sqlalchemy import select

from models.contracts import ResumeContract
from models.db import transaction
from models.tables import Event, Run
from tests.flows.effects import applied, calls, outside, receipt_of
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, list_interrupts, submit_resume
from worker.runs import list_effects

RUNS_PER_CASE = 20
# The repair path needs an operator per run; fewer runs show it as well.
BLIND_RUNS = 10
CRASH_POINTS = ["before_write", "after_write", "after_applied"]
WORKER_ENV = {"INTERLUDE_LEASE_SECONDS": "2", "INTERLUDE_REAP_INTERVAL": "0.5"}


def _start_cluster(start: Callable[..., WorkerProcess], tmp_path: Path) -> None:
    start("-c", "2", **WORKER_ENV)
    start("-c", "2", **WORKER_ENV)
    start("-s", str(tmp_path / "beat-schedule"), kind="beat", **WORKER_ENV)


def _states(run_ids: list[str]) -> dict[str, str]:
    with transaction(readonly=True) as session:
        return dict(session.execute(select(Run.id, Run.state).where(Run.id.in_(run_ids))).all())


def _all_in(run_ids: list[str], states: set[str]) -> bool:
    return all(state in states for state in _states(run_ids).values())


def _events(run_id: str, trigger: str) -> list[Event]:
    with transaction(readonly=True) as session:
        return list(
            session.execute(
                select(Event)
                .where(Event.run_id == run_id, Event.trigger == trigger)
                .order_by(Event.id)
            ).scalars()
        )


def _counted(run_id: str, trigger: str) -> int:
    return sum(int(e.detail.get("count", 1)) for e in _events(run_id, trigger))


def _crashed(run_id: str, point: str) -> bool:
    return bool(outside().exists(f"crashed:{run_id}:{point}"))


def test_killed_at_every_point_of_an_effect_applies_it_exactly_once(
    db: str, broker_url: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    # Given two workers, beat running the reaper, and 20 runs for each crash point
    _start_cluster(start_worker, tmp_path)
    runs = {
        point: [enqueue_run("effect_crash", {"crash": point}) for _ in range(RUNS_PER_CASE)]
        for point in CRASH_POINTS
    }
    everything = [run_id for ids in runs.values() for run_id in ids]
    # When each run's process is killed at its crash point, then recovered by the reaper
    wait_for(lambda: _all_in(everything, {"succeeded", "failed"}), timeout=180, interval=0.5)
    # Then every run succeeded after really being killed once...
    assert set(_states(everything).values()) == {"succeeded"}
    for point, run_ids in runs.items():
        for run_id in run_ids:
            assert _crashed(run_id, point), (point, run_id)
            # ...the outside world applied the effect exactly once, and was called at most
            # once (a kill before the write never reached it)...
            assert applied(run_id) == 1, (point, run_id)
            assert calls(run_id) == 1, (point, run_id)
            # ...the ledger holds the outside world's receipt...
            [effect] = list_effects(run_id)
            assert effect.status == "applied"
            assert effect.receipt == receipt_of(effect.idempotency_key)
            # ...another process finished the step the killed one had claimed...
            claims = [c for c in _events(run_id, "claim") if c.detail["step"] == "pay"]
            assert len(claims) >= 2 and claims[-1].actor != claims[0].actor
            assert len(_events(run_id, "requeue")) >= 1
            # ...and the operator can tell how: reconciled, at every point (an effect's outcome
            # is recorded with its step's commit, which each of these kills came before; a
            # recorded outcome is skipped, see tests/integration/test_effects.py)
            assert _counted(run_id, "effect_reconciled") >= 1
            assert _counted(run_id, "effect_skipped") == 0
            assert _counted(run_id, "step_reexecuted") >= 1


def _resolve(interrupt: Any, credential: str, finding: dict[str, Any]) -> bool:
    result = submit_resume(
        ResumeContract.for_interrupt(
            interrupt, actor="night-operator", input=finding, expires_in=timedelta(hours=1)
        ),
        credential,
    )
    return result.accepted


def test_killed_effect_that_cannot_be_reconciled_becomes_a_repair_for_an_operator(
    db: str, broker_url: str, start_worker: Callable[..., WorkerProcess], tmp_path: Path
) -> None:
    credential = add_actor("night-operator", ["operator"])
    _start_cluster(start_worker, tmp_path)
    # Given runs whose effect has no way to find out whether it happened, killed inside it
    # before (half of them) or after (the other half) the outside write
    points = {
        enqueue_run("effect_crash", {"crash": point, "blind": True}): point
        for point in ["before_write", "after_write"] * (BLIND_RUNS // 2)
    }
    run_ids = list(points)
    # Then every run stops with a repair interrupt naming the effect, and nothing is retried
    wait_for(lambda: _all_in(run_ids, {"waiting", "failed"}), timeout=180, interval=0.5)
    assert set(_states(run_ids).values()) == {"waiting"}
    repairs = list_interrupts(status="pending", kind="repair")
    assert sorted(r.run_id for r in repairs) == sorted(run_ids)
    for repair in repairs:
        assert repair.name == "repair:pay_blind"
        assert repair.evidence["effect"] == "pay_blind"
        assert _crashed(repair.run_id, points[repair.run_id])
        assert calls(repair.run_id) == (1 if points[repair.run_id] == "after_write" else 0)
    # When an operator looks each effect up in the outside world and records the finding
    for repair in repairs:
        found = receipt_of(repair.evidence["idempotency_key"])
        finding = (
            {"outcome": "not_applied"}
            if found is None
            else {"outcome": "applied", "receipt": found}
        )
        assert _resolve(repair, credential, finding)
    # Then every run finishes with its effect applied exactly once
    wait_for(lambda: _all_in(run_ids, {"succeeded", "failed"}), timeout=120, interval=0.5)
    assert set(_states(run_ids).values()) == {"succeeded"}
    for run_id in run_ids:
        assert applied(run_id) == 1, (points[run_id], run_id)
        [effect] = list_effects(run_id)
        assert effect.status == "applied"
        assert effect.receipt == receipt_of(effect.idempotency_key)
        assert _counted(run_id, "repair_raised") == 1
