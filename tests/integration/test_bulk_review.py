"""Bulk review: several interrupts of one kind answered together, each by its own contract."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import func, select

from models.db import transaction
from models.errors import InvalidInputError
from models.tables import ResumeAttempt
from tests.resumes import contract_for, drain_pending
from worker import add_actor, enqueue_run, get_interrupt, submit_resume
from worker.cli import main
from worker.gateway.bulk_review import Shown, answer_together, new_batch, select_for_review
from worker.testing import TaskRecorder, drain

pytestmark = pytest.mark.usefixtures("scratch")


def _recorded() -> dict[str, int]:
    with transaction(readonly=True) as session:
        rows = session.execute(
            select(ResumeAttempt.outcome, func.count()).group_by(ResumeAttempt.outcome)
        ).all()
    return {outcome: int(n) for outcome, n in rows}


def test_twenty_with_one_stale_among_them(db: str, tasks: TaskRecorder) -> None:
    # Given twenty approvals, shown to alice for review
    credential = add_actor("alice", ["approver"])
    runs = [enqueue_run("approval", {"env": "prod", "diff": f"d-{n}"}) for n in range(20)]
    shown = [Shown.of(i) for i in select_for_review([drain_pending(r).id for r in runs])]
    # And the twelfth answered by carol while she read
    other = add_actor("carol", ["approver"])
    assert submit_resume(
        contract_for(get_interrupt(shown[11].interrupt_id), "carol"), other
    ).accepted
    # When she approves all twenty together
    batch = new_batch()
    results = answer_together(
        shown, actor="alice", credential=credential, decision="approved", batch=batch
    )
    # Then each has its own outcome: nineteen accepted, one stale; every attempt recorded
    outcomes = [r.outcome.value for r in results]
    assert outcomes.count("accepted") == 19 and outcomes[11] == "stale"
    assert len({r.attempt_id for r in results}) == 20
    assert _recorded() == {"accepted": 20, "stale": 1}
    # Each contract was its own, bound to its interrupt's own evidence
    with transaction(readonly=True) as session:
        payloads = [
            p
            for (p,) in session.execute(
                select(ResumeAttempt.payload).where(ResumeAttempt.actor_id == "alice")
            )
        ]
    assert sorted((p["interrupt_id"], p["evidence_hash"]) for p in payloads) == sorted(
        (s.interrupt_id, s.evidence_hash) for s in shown
    )
    # And the same confirm sent again answers nothing twice (the batch's keys)
    again = answer_together(
        shown, actor="alice", credential=credential, decision="approved", batch=batch
    )
    assert {r.outcome.value for r in again} == {"duplicate"}
    drain()
    assert all(get_interrupt(s.interrupt_id).status == "resolved" for s in shown)


def test_interrupts_of_several_kinds_are_not_reviewed_together(
    db: str, tasks: TaskRecorder
) -> None:
    credential = add_actor("alice", ["approver", "finance", "legal"])
    approval = drain_pending(enqueue_run("approval", {}))
    evidence = Shown.of(approval).__dict__ | {"kind": "evidence"}
    with pytest.raises(InvalidInputError, match="of one kind; these are approval, evidence"):
        answer_together(
            [Shown.of(approval), Shown(**evidence)],
            actor="alice",
            credential=credential,
            decision="approved",
        )
    assert _recorded() == {}


def test_the_command_prints_every_evidence_then_each_outcome(
    db: str,
    tasks: TaskRecorder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    credential = add_actor("alice", ["approver"])
    runs = [enqueue_run("approval", {"diff": f"cli-{n}"}) for n in range(3)]
    ids = [drain_pending(r).id for r in runs]
    monkeypatch.setenv("INTERLUDE_ACTOR_TOKEN", credential)
    status = main(
        [
            "resume-many",
            "--all",
            "--kind",
            "approval",
            "--actor",
            "alice",
            "--decision",
            "approved",
            "--yes",
            "--json",
        ]
    )
    out, err = capsys.readouterr()
    assert status == 0, err
    assert all(f"cli-{n}" in err for n in range(3))  # the evidence, before
    assert sorted(r["interrupt_id"] for r in json.loads(out)) == sorted(ids)
    assert {r["outcome"] for r in json.loads(out)} == {"accepted"}
    # Naming nothing is one line, exit 2
    assert main(["resume-many", "--actor", "alice", "--decision", "approved", "--yes"]) == 2
    assert "name interrupts, or give --all with --kind" in capsys.readouterr().err
