"""``interlude demo`` as a new user runs it: a fresh folder, no server, the console script."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

NARRATION = [
    "run started",
    "waiting",
    "worker free",
    "stale resume refused",
    "authorized resume accepted",
    "effect applied once",
    "finished",
]


def demo_command() -> list[str]:
    script = Path(sys.executable).parent / "interlude"
    if script.exists():
        return [str(script), "demo"]
    return [
        sys.executable,
        "-c",
        "import sys; from worker.cli.demo import run_demo; sys.exit(run_demo())",
    ]


def run_demo(cwd: Path, command: list[str] | None = None) -> subprocess.CompletedProcess[str]:
    # A fresh machine: none of the test session's INTERLUDE_* settings, no model configured.
    env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLUDE_")}
    env.pop("AGENT_MODEL", None)
    return subprocess.run(
        command or demo_command(), cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


@pytest.mark.slow
def test_the_demo_tells_the_procurement_story_and_cleans_up(tmp_path: Path) -> None:
    # When a new user runs the demo in an empty folder
    first = run_demo(tmp_path)

    # Then it ends successfully, narrating each part of the story in order
    assert first.returncode == 0, first.stdout + first.stderr
    positions = [first.stdout.find(f"] {part}") for part in NARRATION if part != "worker free"]
    assert -1 not in positions and positions == sorted(positions), first.stdout
    assert "worker free" in first.stdout
    assert "-> stale" in first.stdout and "-> accepted" in first.stdout
    assert "1 check on record" in first.stdout
    assert "succeeded (ordered)" in first.stdout
    # ... no credential is ever printed, nor kombu's warning about the broker's host
    assert "ilc_" not in first.stdout + first.stderr
    assert "No hostname was supplied" not in first.stdout + first.stderr
    # ... everything it kept is under .interlude/demo, and its worker is gone
    assert (tmp_path / ".interlude" / "demo" / "interlude.db").exists()
    assert not (tmp_path / "control").exists()
    found = re.search(r"pid (\d+)", first.stdout)
    assert found is not None
    assert not alive(int(found.group(1)))

    # When it is run again in the same folder, it starts from a clean slate and succeeds again
    second = run_demo(tmp_path)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "finished" in second.stdout


def test_the_demo_stops_its_worker_when_the_story_fails(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from worker.app import app
    from worker.cli import demo

    # Given a demo whose story breaks once its real worker is running
    started: list[subprocess.Popen[bytes]] = []
    start = demo._start_worker

    def start_and_remember(env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
        started.append(start(env, log))
        return started[-1]

    def broken_story(settings: object) -> None:
        raise RuntimeError("the story broke")

    monkeypatch.setattr(demo, "_start_worker", start_and_remember)
    monkeypatch.setattr(demo, "_story", broken_story)
    monkeypatch.chdir(tmp_path)
    broker_before = (os.environ.get("INTERLUDE_BROKER_URL"), app.conf.broker_url)

    # When it runs
    status = demo.run_demo()

    # Then it fails with one line, its worker is stopped, and this process is as it was
    assert status == 1
    assert "interlude demo failed: RuntimeError: the story broke" in capsys.readouterr().err
    assert len(started) == 1 and started[0].poll() is not None
    assert (os.environ.get("INTERLUDE_BROKER_URL"), app.conf.broker_url) == broker_before


AGENT_NARRATION = [
    "[1] run started",
    "[2] the model proposes refund(",
    "[3] fay rejects it",
    "[4] the model proposes again",
    "[5] sam edits it",
    "[6] effect applied once",
    "[7] finished",
]


@pytest.mark.slow
@pytest.mark.parametrize("how", ["interlude demo agent", "python -m examples.agent"])
def test_the_agent_demo_tells_its_story(tmp_path: Path, how: str) -> None:
    # When a new user runs the agent demo in an empty folder, either way
    command = [*demo_command(), "agent"]
    if how.startswith("python"):
        command = [sys.executable, "-m", "examples.agent"]
    ran = run_demo(tmp_path, command)
    # Then it ends successfully, narrating each part of the story in order
    assert ran.returncode == 0, ran.stdout + ran.stderr
    positions = [ran.stdout.find(part) for part in AGENT_NARRATION]
    assert -1 not in positions and positions == sorted(positions), ran.stdout
    assert "amount=1240" in ran.stdout and "-> denied" in ran.stdout
    assert "refund RF-" in ran.stdout and "of 330 EUR" in ran.stdout
    assert "ilc_" not in ran.stdout + ran.stderr
    found = re.search(r"pid (\d+)", ran.stdout)
    assert found is not None and not alive(int(found.group(1)))
