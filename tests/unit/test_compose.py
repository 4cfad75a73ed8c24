"""docker-compose.yml only runs things this project has: its image, commands and settings."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from models.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
SERVICES = {"redis", "postgres", "migrate", "worker", "beat", "flower", "metrics", "web"}
OUR_SERVICES = SERVICES - {"redis", "postgres"}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


def command_of(service: dict[str, Any]) -> list[str]:
    command = service["command"]
    return command.split() if isinstance(command, str) else [str(part) for part in command]


def run_help(argv: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``argv --help`` as the container would run it: parses every option, connects nowhere."""
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("INTERLUDE_")}
    full_env.update(env)
    return subprocess.run(
        [*argv, "--help"], cwd=cwd, env=full_env, capture_output=True, text=True, timeout=60
    )


def test_the_stack_has_every_process(compose: dict[str, Any]) -> None:
    assert set(compose["services"]) == SERVICES


def test_the_image_is_built_once_from_files_the_project_has(compose: dict[str, Any]) -> None:
    services = compose["services"]
    builders = [name for name in OUR_SERVICES if "build" in services[name]]
    assert builders == ["migrate"], builders
    image = services["migrate"]["image"]
    for name in OUR_SERVICES:
        assert services[name]["image"] == image, name
        if name != "migrate":
            # Never pulled: the image is the one migrate built.
            assert services[name]["pull_policy"] == "never", name
    build = services["migrate"]["build"]
    context = ROOT / (build if isinstance(build, str) else build.get("context", "."))
    assert (context / "Dockerfile").is_file()
    dockerfile = (ROOT / "Dockerfile").read_text()
    copied = re.findall(r"^COPY\s+(.+?)\s+\S+$", dockerfile, re.M)
    sources = [source for line in copied for source in line.split()]
    assert sources, "the Dockerfile copies nothing"
    for source in sources:
        assert (ROOT / source).exists(), f"the Dockerfile copies {source}, which is missing"
    # Dependencies are installed before any source is copied: a code change reuses that layer.
    assert dockerfile.index("-r /tmp/requirements.txt") < dockerfile.index("COPY models")


def test_workers_scale_and_report_their_health(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "ports" not in worker, "a fixed host port stops --scale worker=2"
    assert "inspect ping" in " ".join(worker["healthcheck"]["test"])


def test_settings_in_the_stack_are_ones_interlude_reads(compose: dict[str, Any]) -> None:
    known = {f"INTERLUDE_{name.upper()}" for name in Settings.model_fields}
    for name in OUR_SERVICES:
        env = compose["services"][name]["environment"]
        unknown = {key for key in env if key.startswith("INTERLUDE_")} - known
        assert not unknown, f"{name}: interlude does not read {sorted(unknown)}"
        # The database is the stack's PostgreSQL through psycopg 3, the broker its Redis
        assert env["INTERLUDE_DATABASE_URL"].startswith("postgresql+psycopg://")
        assert "@postgres:5432/" in env["INTERLUDE_DATABASE_URL"]
        assert env["INTERLUDE_BROKER_URL"].startswith("redis://redis:6379")
        for module in env["INTERLUDE_FLOWS"].split(","):
            assert (ROOT / Path(*module.split(".")).with_suffix(".py")).is_file(), module
    metrics = compose["services"]["metrics"]
    port = command_of(metrics)[command_of(metrics).index("--port") + 1]
    assert f"{port}:{port}" in metrics["ports"]


def test_the_web_inbox_listens_on_its_published_port(compose: dict[str, Any]) -> None:
    web = compose["services"]["web"]
    assert command_of(web)[:2] == ["interlude", "serve"]
    env = web["environment"]
    # Reachable from outside its container, on the port the stack publishes.
    assert env["INTERLUDE_WEB_HOST"] == "0.0.0.0"
    port = env["INTERLUDE_WEB_PORT"]
    assert f"{port}:{port}" in web["ports"]
    assert f":{port}" in env["INTERLUDE_WEB_BASE_URL"]
    assert f":{port}/healthz" in " ".join(web["healthcheck"]["test"])


def test_the_migration_runs_before_the_processes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("worker", "beat", "flower", "metrics", "web"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", sorted(OUR_SERVICES))
def test_every_command_is_one_the_project_has(
    compose: dict[str, Any], name: str, tmp_path: Path
) -> None:
    service = compose["services"][name]
    command = command_of(service)
    env = {k: str(v) for k, v in service["environment"].items()}
    if command[0] == "interlude":
        # The console script is declared, and the verb exists (argparse refuses unknown verbs).
        scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
        assert scripts["interlude"] == "worker.cli:main"
        argv = [sys.executable, "-c", "import sys; from worker.cli import main; sys.exit(main())"]
        result = run_help([*argv, *command[1:]], env, tmp_path)
    else:
        # celery -A worker <subcommand> ...: the app imports, the subcommand and options exist.
        assert command[:3] == ["celery", "-A", "worker"], command
        assert command[3] in {"worker", "beat", "flower"}
        result = run_help([sys.executable, "-m", "celery", *command[1:]], env, tmp_path)
    assert result.returncode == 0, result.stderr
    assert "usage" in result.stdout.lower()
