"""Small things an operator met on a first pass (issue 43, finding 11), through the command."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest

from worker import enqueue_run
from worker.cli import main
from worker.cli.purge import finished_before
from worker.testing import TaskRecorder


def test_json_between_a_group_and_its_verb(db: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "--json", "list"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_runs_wait_json_carries_the_run_s_output(
    tasks: TaskRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    run_id = enqueue_run("three_steps", {})
    tasks.drain()
    capsys.readouterr()
    assert main(["runs", "wait", run_id, "--json"]) == 0
    waited = json.loads(capsys.readouterr().out)
    assert waited["state"] == "succeeded"
    assert waited["output"] is not None and waited["output"] == _output(run_id)


def _output(run_id: str) -> object:
    from worker import get_run

    return get_run(run_id).output


def test_bulk_cancel_without_a_terminal_says_how_many_it_would_cancel(
    tasks: TaskRecorder, capsys: pytest.CaptureFixture[str]
) -> None:
    for _ in range(2):
        enqueue_run("approval", {})
    tasks.drain()
    capsys.readouterr()
    # (pytest's stdin is no terminal)
    assert main(["runs", "cancel", "--flow", "approval", "--actor", "ops"]) == 5
    error = capsys.readouterr().err
    assert "pass --yes to cancel 2 run(s) without asking" in error


def test_purge_takes_an_age_and_a_date_a_day_ahead_as_now() -> None:
    now = datetime.now(UTC)
    assert abs(finished_before("1h") - (now - timedelta(hours=1))) < timedelta(seconds=5)
    assert abs(finished_before("7d") - (now - timedelta(days=7))) < timedelta(seconds=5)
    # Tomorrow's midnight is ahead of now, and at most a day ahead, whatever the time of day
    # (now + 20 h was still today before 04:00 UTC)
    tomorrow = (now + timedelta(days=1)).date().isoformat()
    assert abs(finished_before(tomorrow) - now) < timedelta(seconds=5)


def test_the_demo_s_hint_runs_interlude_where_it_is(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys
    from pathlib import Path

    from worker.cli.demo import _command

    # Given a shell whose PATH lacks the virtualenv (make demo ran .venv/bin/interlude)
    monkeypatch.setenv("PATH", "/nonexistent")
    command = _command()
    assert Path(command).resolve() == (Path(sys.executable).parent / "interlude").resolve()
