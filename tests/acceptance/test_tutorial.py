"""The tutorial's second terminal (docs/tutorial/answer.sh), run by bash against a real worker."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from examples import payments
from tests.conftest import worker_env
from tests.services import ROOT, WorkerProcess

BIN = Path(sys.executable).parent


@pytest.fixture()
def provider_table(database_url: str) -> Iterator[None]:
    yield
    payments.drop_table()


def test_the_tutorial_runs_as_written(
    start_worker: Callable[..., WorkerProcess], database_url: str, provider_table: None
) -> None:
    # Given a worker that loads the tutorial's flow (the tutorial's first terminal)
    start_worker(INTERLUDE_FLOWS="examples.refunds")
    env = worker_env(database_url, PATH=f"{BIN}{os.pathsep}{os.environ['PATH']}")

    # When the second terminal's commands run, as written, under bash
    done = subprocess.run(
        ["bash", "-euo", "pipefail", "docs/tutorial/answer.sh"],
        cwd=ROOT,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
    )

    # Then every command succeeds: the answer is accepted and the run succeeded
    assert done.returncode == 0, done.stdout + done.stderr
    assert "accepted" in done.stdout.splitlines()
    assert "succeeded" in done.stdout
    assert [refund["amount"] for refund in payments.refunds_for("C-17")] == [42.5]
