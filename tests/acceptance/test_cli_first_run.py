"""A new operator's first minutes, through the real console script: conventions, a fresh
database, configuration mistakes and a project folder that shadows one of our packages."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import worker_env
from tests.services import ROOT, create_pg_database

BIN = Path(sys.executable).parent
INTERLUDE = BIN / "interlude"


def run(
    *args: str, env: dict[str, str], cwd: Path = ROOT, program: Path = INTERLUDE
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(program), *args],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )


def one_error_line(done: subprocess.CompletedProcess[str], status: int) -> str:
    assert done.returncode == status, (done.returncode, done.stderr, done.stdout)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert "Traceback" not in done.stderr
    return lines[0]


@pytest.fixture()
def fresh_postgres() -> Iterator[str]:
    """An empty PostgreSQL database, named the way hosting providers hand it out."""
    url, drop = create_pg_database()
    yield url.replace("postgresql+psycopg://", "postgres://", 1)
    drop()


def test_a_fresh_postgres_url_is_told_to_upgrade_then_works(fresh_postgres: str) -> None:
    # Given a postgres:// URL of a database without interlude's schema
    env = worker_env(fresh_postgres)

    # When the operator lists runs, checks the schema, upgrades and checks again
    listed = run("runs", "list", env=env)
    behind = run("db", "check", env=env)
    before = run("--json", "db", "current", env=env)
    upgraded = run("db", "upgrade", env=env)
    after = run("db", "check", "--json", env=env)
    history = run("db", "history", "--json", env=env)

    # Then each refusal is one line saying what to do, and the URL is accepted as it is
    assert "interlude db upgrade" in one_error_line(listed, 1)
    assert 'relation "runs" does not exist' in listed.stderr
    assert "interlude db upgrade" in one_error_line(behind, 1)
    assert json.loads(before.stdout)["revision"] is None
    assert upgraded.returncode == 0, upgraded.stderr
    assert json.loads(after.stdout)["up_to_date"] is True and after.returncode == 0
    revisions = json.loads(history.stdout)
    assert revisions[0]["id"] == json.loads(after.stdout)["head"]


def test_a_missing_embedded_database_is_made_only_by_the_upgrade(tmp_path: Path) -> None:
    # Given a SQLite URL whose file and folders are not there (a typo, or before the upgrade)
    folder = tmp_path / "not" / "yet"
    env = worker_env(f"sqlite:///{folder / 'interlude.db'}")

    # When the operator lists, inspects and checks, then upgrades and lists again
    listed = run("runs", "list", env=env)
    shown = run("runs", "show", "run-0123456789", env=env)
    actors = run("actors", "list", env=env)
    current = run("--json", "db", "current", env=env)
    checked = run("db", "check", env=env)
    made = (tmp_path / "not").exists()
    upgraded = run("db", "upgrade", env=env)
    after = run("runs", "list", env=env)

    # Then nothing that only reads makes a file or a folder, and each says what to do
    for done in (listed, shown, actors, checked):
        line = one_error_line(done, 1)
        assert (
            f"no database file at {folder / 'interlude.db'}" in line
            or "no interlude schema" in line
        )
        assert "interlude db upgrade" in line
    assert json.loads(current.stdout)["revision"] is None, current.stderr
    assert not made
    # And the upgrade makes the database, folders included, which then works
    assert upgraded.returncode == 0, upgraded.stderr
    assert after.returncode == 0 and "runs (0)" in after.stdout, after.stderr


def test_conventions_version_json_anywhere_and_json_errors(tmp_path: Path) -> None:
    env = worker_env(f"sqlite:///{tmp_path / 'fresh.db'}")

    # When the operator asks for the version, and uses --json before the verb
    version = run("--version", env=env)
    listed = run("--json", "runs", "list", env=env)
    bad = run("--json", "runs", "list", "--state", "sleeping", env=env)
    upgraded = run("db", "upgrade", env=env)
    example = run("runs", "start", "procurement", "--input", '{"request_id": "PR-9"}', env=env)

    # Then the version prints; errors under --json are one JSON object on stderr
    assert version.returncode == 0 and version.stdout.startswith("interlude "), version.stderr
    assert listed.stdout == ""
    refused = json.loads(one_error_line(listed, 1))
    assert refused["exit"] == 1 and "interlude db upgrade" in refused["error"]
    usage = json.loads(one_error_line(bad, 2))
    # And an example started from the command without its business record is refused at once
    assert upgraded.returncode == 0, upgraded.stderr
    assert "no purchase request 'PR-9': submit it first" in one_error_line(example, 2)
    assert usage["exit"] == 2
    assert "unknown state 'sleeping'; one of queued, running" in usage["error"]


@pytest.mark.parametrize(
    ("variable", "value", "says"),
    [
        ("INTERLUDE_LEASE_SECONDS", "abc", "INTERLUDE_LEASE_SECONDS='abc': expected a number"),
        ("INTERLUDE_SWEEP_INTERVAL", "5s", "INTERLUDE_SWEEP_INTERVAL='5s': expected a number"),
        ("INTERLUDE_MAX_CLAIMS", "2.5", "INTERLUDE_MAX_CLAIMS='2.5': expected a whole number"),
        ("INTERLUDE_FLOWS", "examples.nope", "INTERLUDE_FLOWS names 'examples.nope'"),
    ],
)
def test_a_bad_setting_is_one_line_naming_the_variable(
    variable: str, value: str, says: str, tmp_path: Path
) -> None:
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", **{variable: value})
    done = run("runs", "start", "procurement", "--input", "{}", env=env)
    assert says in one_error_line(done, 1)
    # --help needs no configuration at all
    assert run("--help", env=env).returncode == 0


def test_a_worker_with_a_flow_module_typo_refuses_to_start(tmp_path: Path) -> None:
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", INTERLUDE_FLOWS="examples.nope")
    done = run(
        "-A",
        "worker",
        "worker",
        "--without-mingle",
        "--without-gossip",
        "-P",
        "solo",
        env=env,
        program=BIN / "celery",
    )
    assert done.returncode == 1, done.stderr
    assert "ready." not in done.stdout + done.stderr
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("interlude: error:")]
    assert "INTERLUDE_FLOWS names 'examples.nope'" in line
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(("own", "shadowed"), [("models", "package"), ("beat_schedule", "module")])
def test_a_models_py_in_the_project_folder_is_named_with_what_to_do(
    tmp_path: Path, own: str, shadowed: str
) -> None:
    # Given a project folder that holds its own models.py (or beat_schedule.py)
    (tmp_path / f"{own}.py").write_text("TABLES = []\n", encoding="utf-8")
    env = worker_env(f"sqlite:///{tmp_path / 'db.sqlite'}", INTERLUDE_FLOWS="")

    # When Python code and the celery command import worker there
    imported = run("-c", "import worker", env=env, cwd=tmp_path, program=Path(sys.executable))
    pinged = run("-A", "worker", "inspect", "ping", env=env, cwd=tmp_path, program=BIN / "celery")

    # Then both name the file, the package it hides and what to do; celery in one line
    shadow = f"{tmp_path / own}.py shadows interlude's {shadowed} '{own}'"
    assert shadow in imported.stderr.strip().splitlines()[-1]
    assert "rename that file" in imported.stderr
    assert shadow in one_error_line(pinged, 1)
    # And the interlude command, which never puts the folder first, still works there
    assert run("--version", env=env, cwd=tmp_path).returncode == 0


def test_an_unset_database_url_is_said_with_the_embedded_database_s_path(tmp_path: Path) -> None:
    # Given a shell where INTERLUDE_DATABASE_URL was not set (forgotten, or the embedded mode)
    env = {k: v for k, v in worker_env("unused").items() if k != "INTERLUDE_DATABASE_URL"}
    database = tmp_path / ".interlude" / "interlude.db"
    notice = (
        "interlude: INTERLUDE_DATABASE_URL is not set: using the embedded SQLite database at "
        f"{database}"
    )

    # When the operator lists runs, upgrades as told, and lists again, in that folder
    listed = run("runs", "list", env=env, cwd=tmp_path)
    upgraded = run("db", "upgrade", env=env, cwd=tmp_path)
    after = run("--json", "runs", "list", env=env, cwd=tmp_path)

    # Then every command says first which database it uses, by its full path, on stderr
    assert listed.returncode == 1
    assert listed.stderr.splitlines()[0] == notice
    assert f"no database file at {database}" in listed.stderr.splitlines()[1]
    assert upgraded.returncode == 0 and upgraded.stderr.splitlines()[0] == notice
    assert database.is_file()
    assert after.returncode == 0 and after.stderr.splitlines() == [notice]
    assert json.loads(after.stdout) == []
    # And --help needs nothing and says nothing of it
    assert run("runs", "list", "--help", env=env, cwd=tmp_path).stderr == ""
