"""``interlude interrupts show`` and ``interlude resume`` for a tool-call review, on both
databases: the command shows the proposed call and approves, edits or rejects it through the
gateway, where an edit is authorized again for the call it became."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.flows import agents
from tests.resumes import drain_finished, drain_pending
from worker import add_actor, enqueue_run, get_run, list_resume_attempts
from worker.cli import main
from worker.cli.exits import BAD_INPUT, RESUME_EXIT
from worker.cli.inputs import TOKEN_ENV
from worker.testing import TaskRecorder

pytestmark = pytest.mark.usefixtures("scratch")


def _resume(monkeypatch: pytest.MonkeyPatch, credential: str, *argv: str) -> int:
    monkeypatch.setenv(TOKEN_ENV, credential)
    return main(["resume", *argv, "--yes"])


def test_show_names_the_call_and_how_to_answer_it(
    tasks: TaskRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    capsys.readouterr()
    assert main(["interrupts", "show", shown.id]) == 0
    out = capsys.readouterr().out
    assert 'proposed call: refund(order="B-7", amount=300)' in out
    assert f"interlude resume {shown.id} --actor ID --approve" in out
    assert """--edit '{"amount": ...}'""" in out
    assert "--reject --message" in out
    # And as JSON, the interrupt carries the call
    assert main(["interrupts", "show", shown.id, "--json"]) == 0
    view = json.loads(capsys.readouterr().out)["interrupt"]
    assert view["review"] == {"tool": "refund", "args": {"order": "B-7", "amount": 300}}


def test_approve_runs_the_call_as_proposed(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mia = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    assert _resume(monkeypatch, mia, shown.id, "--actor", "mia", "--approve") == 0
    assert "as proposed" in capsys.readouterr().out
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 300}]
    assert get_run(run_id).output["edited"] is False


def test_an_edit_names_one_field_and_is_authorized_for_what_it_became(
    tasks: TaskRecorder,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
) -> None:
    mia = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    # When the manager raises the refund beyond her authority, naming only the amount
    status = _resume(monkeypatch, mia, shown.id, "--actor", "mia", "--edit", '{"amount": 5000}')
    # Then it is denied (exit 14), said in one line, recorded; nothing ran
    assert status == RESUME_EXIT["denied"]
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and "finance-lead" in err, err
    [attempt] = list_resume_attempts(interrupt_id=shown.id)
    assert attempt.outcome == "denied"
    assert attempt.payload["input"] == {"args": {"order": "B-7", "amount": 5000}}
    assert get_run(run_id).state == "waiting" and agents.executed(run_id) == []
    # When she lowers it instead (from a file), the edited call runs, the rest as proposed
    edit = tmp_path / "edit.json"
    edit.write_text(json.dumps({"amount": 250}))
    status = _resume(monkeypatch, mia, shown.id, "--actor", "mia", "--edit", f"@{edit}")
    assert status == 0
    out = capsys.readouterr().out
    assert "edited: amount 300 -> 250" in out, out
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == [{"order": "B-7", "amount": 250}]
    assert get_run(run_id).output["edited"] is True


def test_reject_tells_the_step_why_and_runs_nothing(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch
) -> None:
    mia = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    why = "the order was never delivered"
    assert _resume(monkeypatch, mia, shown.id, "--actor", "mia", "--reject", "--message", why) == 0
    assert drain_finished(run_id) == "succeeded"
    assert agents.executed(run_id) == []
    assert get_run(run_id).output["told_model"] == why


def test_an_edit_the_arguments_model_refuses_is_not_submitted(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mia = add_actor("mia", ["manager"])
    run_id = enqueue_run("agent_review", {"amount": 300})
    shown = drain_pending(run_id, "refund")
    status = _resume(monkeypatch, mia, shown.id, "--actor", "mia", "--edit", '{"amount": 0}')
    assert status == RESUME_EXIT["invalid_input"]
    assert "args.amount" in capsys.readouterr().err
    assert list_resume_attempts(interrupt_id=shown.id) == []


def test_review_options_on_another_interrupt_are_refused(
    tasks: TaskRecorder, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mia = add_actor("mia", ["manager"])
    run_id = enqueue_run("amounts", {})
    asked = drain_pending(run_id, "go")
    status = _resume(monkeypatch, mia, asked.id, "--actor", "mia", "--edit", '{"amount": 5}')
    assert status == BAD_INPUT
    err = capsys.readouterr().err
    assert "--edit is for a tool-call review" in err and "go.v1" in err, err
    assert list_resume_attempts(interrupt_id=asked.id) == []
    # While --approve and --reject are shorthands for any interrupt's decision
    assert _resume(monkeypatch, mia, asked.id, "--actor", "mia", "--approve") == 0
    assert drain_finished(run_id) == "succeeded"
