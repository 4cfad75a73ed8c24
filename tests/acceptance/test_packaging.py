"""The built wheel carries everything a deployment needs, and its worker starts from anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from tests.services import ROOT
from worker.ops.processes import start_celery, stop_process

# Both tests share one wheel, built in the checkout's build/ folder: on one xdist process, so
# that two builds never write that folder at once (one failed so, on a missing file).
pytestmark = pytest.mark.xdist_group("packaging")


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built and unpacked into a folder of its own."""
    wheels = tmp_path_factory.mktemp("wheel")
    # With the build backend installed beside the tests ([dev]): no package index is reached.
    command = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    built = subprocess.run(
        [*command, str(ROOT), "-w", str(wheels)], capture_output=True, text=True, cwd=wheels
    )
    assert built.returncode == 0, f"pip wheel failed:\n{built.stderr[-3000:]}"
    (wheel,) = wheels.glob("interlude-*.whl")
    target = tmp_path_factory.mktemp("site")
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        archive.extractall(target)
    for needed in (
        "beat_schedule.py",
        "models/migrations/env.py",
        "models/migrations/versions/0001_initial_schema.py",
        "worker/py.typed",
        "worker/cli/__init__.py",
        "worker/web/templates/interrupt.html",
        "worker/web/static/inbox.css",
    ):
        assert needed in names, needed
    return target


def _installed_env(installed: Path, folder: Path, *, flows: str) -> dict[str, str]:
    """The embedded default in ``folder``, with the unpacked wheel before the editable
    checkout on the path."""
    return {
        **os.environ,
        "PYTHONPATH": str(installed),
        "INTERLUDE_DATABASE_URL": f"sqlite:///{folder / 'db.sqlite'}",
        "INTERLUDE_BROKER_URL": "filesystem://",
        "INTERLUDE_BROKER_FOLDER": str(folder / "broker"),
        "INTERLUDE_FLOWS": flows,
    }


def test_installed_package_migrates_and_starts_a_worker_outside_the_repository(
    installed: Path, tmp_path: Path
) -> None:
    env = _installed_env(installed, tmp_path, flows="")
    check = (
        "import worker, models.migrate as m; "
        f"assert worker.__file__.startswith({str(installed)!r}), worker.__file__; "
        "m.upgrade(); "
        "assert {'interlude.run_step', 'interlude.resume_run', 'interlude.sweep_expired', "
        "'interlude.reap'} <= set(worker.app.tasks)"
    )
    subprocess.run([sys.executable, "-c", check], check=True, cwd=tmp_path, env=env)
    # The installed package starts a worker that reports ready (the helper fails otherwise).
    proc = start_celery(
        "worker",
        ["--pool", "solo", "--without-mingle", "--without-gossip", "--without-heartbeat"],
        env=env,
        log_path=tmp_path / "worker.log",
        cwd=tmp_path,
    )
    stop_process(proc)


def test_a_worker_started_in_a_project_folder_loads_the_flows_kept_there(
    installed: Path, tmp_path: Path
) -> None:
    # As the walkthrough does it: the flow in myapp/ of the folder the worker starts in
    project = tmp_path / "project"
    (project / "myapp").mkdir(parents=True)
    (project / "myapp" / "__init__.py").write_text("")
    (project / "myapp" / "refunds.py").write_text(
        "from worker import Flow, StepContext\n"
        "refunds = Flow('refund', version=1)\n"
        "@refunds.step()\n"
        "def assess(ctx: StepContext) -> None:\n"
        "    return None\n"
    )
    env = _installed_env(installed, tmp_path, flows="myapp.refunds")
    subprocess.run(
        [sys.executable, "-c", "import models.migrate as m; m.upgrade()"],
        check=True,
        cwd=project,
        env=env,
    )
    # The interlude command starts a run there, and says nothing on stderr: --json output is
    # read whole (kombu once warned of the filesystem broker's missing host on every publish)
    started = subprocess.run(
        [str(Path(sys.executable).with_name("interlude")), "--json", "runs", "start", "refund"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert started.returncode == 0, started.stderr
    assert started.stderr == ""
    assert json.loads(started.stdout)["flow"] == "refund"
    # The ``celery`` command, as a user types it: unlike ``python -m celery``, it does not keep
    # the folder it starts in on ``sys.path`` once it has imported the app.
    celery = Path(sys.executable).with_name("celery")
    log = tmp_path / "worker.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [
                str(celery),
                "-A",
                "worker",
                "worker",
                "-l",
                "info",
                "--pool",
                "solo",
                "--without-mingle",
                "--without-gossip",
                "--without-heartbeat",
            ],
            cwd=project,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        deadline = time.monotonic() + 60
        while b"ready." not in log.read_bytes() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert b"ready." in log.read_bytes(), log.read_text()
    finally:
        stop_process(proc)
