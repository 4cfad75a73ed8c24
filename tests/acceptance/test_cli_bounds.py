"""Every input the ``interlude`` command parses is bounded (issue 11 F): a value too big, too
deep, endless or out of range is one line on stderr with status 2, and nothing is written.

The console script runs in a subprocess against each backend; no worker is needed, since
nothing may get as far as publishing a task.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.acceptance.test_cli import INTERLUDE, Cli
from tests.services import ROOT
from worker import list_resume_attempts
from worker.operate import find_runs

HUGE_INT = "9" * 5000
DEEP = "[" * 100_000


@pytest.fixture()
def bare_cli(db: str) -> Cli:
    return Cli(db)


def _contract(tmp_path: Path, text: str) -> str:
    path = tmp_path / "contract.json"
    path.write_text(text, encoding="utf-8")
    return str(path)


@pytest.mark.parametrize(
    ("args", "says"),
    [
        pytest.param(("runs", "start", "approval", "--input", HUGE_INT), "4300 digits", id="int"),
        pytest.param(
            ("runs", "start", "approval", "--input", f'{{"n": {HUGE_INT}}}'),
            "4300 digits",
            id="int-in-object",
        ),
        pytest.param(
            ("runs", "start", "approval", "--input", DEEP), "nested deeper than 100", id="deep"
        ),
        pytest.param(
            ("runs", "start", "approval", "--input", "@/dev/zero"),
            "longer than 1 MiB",
            id="dev-zero",
        ),
        pytest.param(
            ("runs", "start", "approval", "--input", '{"a": 1e400}'),
            "finite numbers only",
            id="1e400",
        ),
        pytest.param(
            ("runs", "start", "approval", "--input", '{"a": -Infinity}'),
            "finite numbers only",
            id="infinity",
        ),
        pytest.param(
            ("runs", "start", "approval", "--started-by", "a" * 201),
            "--started-by",
            id="started-by",
        ),
        pytest.param(
            ("runs", "start", "approval", "--idempotency-key", "k" * 201),
            "--idempotency-key",
            id="idempotency-key",
        ),
        pytest.param(
            (
                "resume",
                "abcdef12",
                "--actor",
                "a",
                "--decision",
                "approved",
                "--expires-in",
                "1e308",
            ),
            "--expires-in",
            id="expires-in",
        ),
        pytest.param(("runs", "list", "--limit", "9" * 20), "--limit", id="limit"),
        pytest.param(
            ("runs", "list", "--older-than", "9" * 400 + "d"), "--older-than", id="older-than-inf"
        ),
        pytest.param(
            ("runs", "list", "--older-than", "99999999d"), "--older-than", id="older-than-far"
        ),
        pytest.param(("runs", "wait", "abcdef12", "--timeout", "1e308"), "--timeout", id="timeout"),
        pytest.param(
            ("runs", "cancel", "abcdef12", "--actor", "ops", "--reason", "r" * 1001),
            "--reason",
            id="reason",
        ),
    ],
)
def test_an_unbounded_argument_is_one_line_and_status_2(
    bare_cli: Cli, args: tuple[str, ...], says: str
) -> None:
    # When the command is given a value beyond its bounds
    ran = bare_cli.fails(2, *args)

    # Then it says which, in one line (no traceback), without echoing all of it
    assert says in ran.stderr
    assert len(ran.stderr) < 1000
    # And nothing was written
    assert find_runs(limit=None) == []


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (f'{{"schema_version": "resume.v1", "input": {{"n": {HUGE_INT}}}}}', "4300 digits"),
        (DEEP, "nested deeper than 100"),
        ('{"schema_version": "resume.v1", "input": {"n": 1e999}}', "finite numbers only"),
        ("x" * (1024 * 1024 + 1), "longer than 1 MiB"),
    ],
    ids=["huge-int", "deep", "inf", "large"],
)
def test_an_unbounded_contract_file_is_refused_before_submission(
    bare_cli: Cli, tmp_path: Path, text: str, says: str
) -> None:
    # When a contract file holds a value beyond the parser's bounds
    contract = _contract(tmp_path, text)
    ran = bare_cli.fails(2, "resume", "--contract", contract, "--yes", token="ilc_whatever")

    # Then it is refused in one line, and nothing was submitted or recorded
    assert says in ran.stderr and "--contract" in ran.stderr
    assert list_resume_attempts() == []


def test_input_from_an_endless_stdin_is_cut_at_1_mib(bare_cli: Cli) -> None:
    # When --input @- reads from a stream that never ends
    with open("/dev/zero", "rb") as zero:
        done = subprocess.run(
            [str(INTERLUDE), "runs", "start", "approval", "--input", "@-"],
            cwd=ROOT,
            env=bare_cli.env,
            stdin=zero,
            capture_output=True,
            text=True,
            timeout=120,
        )

    # Then it reads at most a little over 1 MiB and refuses it in one line
    assert done.returncode == 2, done.stderr
    assert done.stderr.splitlines() == ["interlude: error: --input: stdin is longer than 1 MiB"]
    assert find_runs(limit=None) == []
