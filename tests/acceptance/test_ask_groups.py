"""Ask groups with a real worker on each database: all, any and two of three."""

from __future__ import annotations

import pytest

from tests.resumes import contract_for, wait_finished
from tests.services import WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_interrupts, submit_resume


@pytest.mark.parametrize(
    ("need", "answering", "left"),
    [
        ("all", ["finance", "legal", "security"], []),
        ("any", ["legal"], ["finance", "security"]),
        (2, ["security", "finance"], ["legal"]),
    ],
    ids=["all", "any", "two-of-three"],
)
def test_a_group_is_released_by_its_need_with_a_real_worker(
    db: str, shared_worker: WorkerProcess, need: object, answering: list[str], left: list[str]
) -> None:
    keys = {team: add_actor(f"{team}-lead", [team]) for team in ("finance", "legal", "security")}
    run_id = enqueue_run("signoff", {"need": need, "teams": ["finance", "legal", "security"]})
    asks = wait_for(
        lambda: (
            {i.name: i for i in get_run(run_id).pending_interrupts}
            if len(get_run(run_id).pending_interrupts) == 3
            else None
        ),
        timeout=30,
    )
    for team in answering:
        assert get_run(run_id).state == "waiting"
        result = submit_resume(contract_for(asks[team], f"{team}-lead"), keys[team])
        assert result.accepted, result.reason
    assert wait_finished(run_id) == "succeeded"
    assert get_run(run_id).output["answered"] == sorted(answering)
    closed = {i.name for i in list_interrupts(run_id=run_id) if i.status == "superseded"}
    assert closed == set(left)
