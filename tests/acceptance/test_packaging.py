"""The built wheel carries everything a deployment needs, and its worker starts from anywhere."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.services import ROOT
from worker.processes import start_celery, stop_process


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The project's wheel, built and unpacked into a folder of its own."""
    wheels = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", str(ROOT), "-w", str(wheels)],
        check=True,
        capture_output=True,
        cwd=wheels,
    )
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


def test_installed_package_migrates_and_starts_a_worker_outside_the_repository(
    installed: Path, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        # The unpacked wheel comes before the editable checkout on the path.
        "PYTHONPATH": str(installed),
        "INTERLUDE_DATABASE_URL": f"sqlite:///{tmp_path / 'db.sqlite'}",
        "INTERLUDE_BROKER_URL": "filesystem://",
        "INTERLUDE_BROKER_FOLDER": str(tmp_path / "broker"),
        "INTERLUDE_FLOWS": "",
    }
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
