"""A real ``celery worker`` whose flow module fails at import, whatever it raises, refuses to
start: one line naming the module and the error, exit 1, never "ready." and every step failing.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import worker_env

CELERY = Path(sys.executable).with_name("celery")
WORKER = ("-A", "worker", "worker", "--without-mingle", "--without-gossip", "-P", "solo")


@pytest.mark.parametrize(
    ("source", "says"),
    [
        (
            "from worker import Flow\nFlow('refund')\nimport os\nos.environ['PAYMENTS_URL']\n",
            "KeyError: 'PAYMENTS_URL'",
        ),
        (
            "from worker import Flow\nFlow('refund', version=True)\n",
            "FlowDefinitionError: flow definition is invalid: flow 'refund': version must be",
        ),
        (
            "from worker import Flow\nflow = Flow('refund', start='nope')\n"
            "@flow.step()\ndef assess(ctx):\n    return None\n",
            "INTERLUDE_FLOWS: flow 'refund' v1 starts at step 'nope', which it does not have",
        ),
    ],
)
def test_a_worker_whose_flow_module_fails_refuses_to_start(
    tmp_path: Path, source: str, says: str
) -> None:
    # Given a project folder whose flow module fails when it is imported
    (tmp_path / "refunds.py").write_text(source, encoding="utf-8")
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", INTERLUDE_FLOWS="refunds")
    # When a worker starts there
    done = subprocess.run(
        [str(CELERY), *WORKER],
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # Then it stops before it is ready, with one line that says why
    assert done.returncode == 1, (done.stdout, done.stderr)
    assert "ready." not in done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("interlude: error:")]
    assert says in line, line
    assert "Traceback" not in done.stderr
