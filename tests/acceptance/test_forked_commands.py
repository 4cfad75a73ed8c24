"""The suite's forked commands (tests/forked.py) are the console script's: the same output,
errors and exit status as ``interlude`` run as installed, in a process of its own."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

import httpx
import pytest

from tests.conftest import worker_env
from tests.forked import INTERLUDE, ROOT, _starts_differently, run_interlude, spawn_interlude
from tests.services import wait_for
from tests.webserver import free_port

pytestmark = pytest.mark.slow


def _installed(args: list[str], env: dict[str, str], input: str = "") -> tuple[int, str, str]:
    done = subprocess.run(
        [str(INTERLUDE), *args],
        cwd=ROOT,
        env=env,
        input=input,
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done.returncode, done.stdout, done.stderr


def _forked(args: list[str], env: dict[str, str], input: str = "") -> tuple[int, str, str]:
    done = run_interlude(args, env=env, input=input)
    return done.returncode, done.stdout, done.stderr


@pytest.mark.parametrize(
    "args",
    [
        ["--version"],
        ["runs", "--help"],
        ["runs", "show", "nope"],  # refused: exit 2, one line on stderr
        ["--json", "runs", "list"],
        ["runs", "start", "approval", "--input", "@-"],  # reads standard input
        ["no-such-verb"],  # argparse's error: exit 2
    ],
)
def test_a_forked_command_says_and_exits_as_the_installed_one(
    db: str, database_url: str, args: list[str]
) -> None:
    env = worker_env(database_url)
    assert not _starts_differently(env)
    stdin = '{"amount": 12'  # not JSON: refused after it was read
    assert _forked(args, env, stdin) == _installed(args, env, stdin)


def test_each_command_is_a_process_of_its_own_with_its_own_environment(
    db: str, database_url: str, tmp_path: Path
) -> None:
    # A command's environment and folder are its own, not the previous command's
    first = run_interlude(["--json", "runs", "list"], env=worker_env(database_url))
    elsewhere = worker_env(f"sqlite:///{tmp_path / 'nothing.db'}")
    second = run_interlude(["--json", "runs", "list"], env=elsewhere, cwd=tmp_path)
    assert first.returncode == 0 and json.loads(first.stdout) == []
    assert second.returncode == 1 and "no interlude schema" in second.stderr
    assert "nothing.db" in second.stderr


def test_a_variable_read_as_python_starts_sends_the_command_to_a_real_process(
    db: str, database_url: str
) -> None:
    env = worker_env(database_url, PYTHONIOENCODING="latin-1")
    assert _starts_differently(env)
    assert run_interlude(["--version"], env=env).returncode == 0


def test_a_command_left_running_is_signalled_and_its_end_read_as_the_installed_ones(
    db: str, database_url: str, tmp_path: Path
) -> None:
    # A command that ends by itself: its status and output
    refused = tmp_path / "refused.log"
    process = spawn_interlude(
        ["runs", "show", "nope"], env=worker_env(database_url), log_path=refused
    )
    assert process.wait(60) == 2
    assert "run id 'nope' is too short" in refused.read_text()
    # `interlude serve`, stopped by SIGTERM to its group: it shuts down cleanly, then ends by the
    # signal (uvicorn raises it again), as the installed command does
    port = free_port()
    log = tmp_path / "serve.log"
    server = spawn_interlude(
        ["serve", "--port", str(port)], env=worker_env(database_url), log_path=log
    )
    wait_for(lambda: _healthy(port), timeout=60)
    os.killpg(server.pid, signal.SIGTERM)
    assert server.wait(30) == -signal.SIGTERM
    assert "Application shutdown complete" in log.read_text()
    installed = subprocess.Popen(
        [str(INTERLUDE), "serve", "--port", str(port)],
        env=worker_env(database_url),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    wait_for(lambda: _healthy(port), timeout=60)
    os.killpg(installed.pid, signal.SIGTERM)
    assert installed.wait(30) == -signal.SIGTERM


def _healthy(port: int) -> bool:
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=2).status_code == 200
    except httpx.TransportError:
        return False
