"""docker-compose.yml only runs things this project has: its image, commands and settings; and
it exposes nothing by default: secrets come from .env, Flower asks for a password, published
ports listen on 127.0.0.1."""

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
SERVICES = {
    "redis",
    "postgres",
    "migrate",
    "worker",
    "maintenance",
    "beat",
    "flower",
    "metrics",
    "web",
}
OUR_SERVICES = SERVICES - {"redis", "postgres"}
# Compose's interpolation: ${VAR}, ${VAR:-default}, ${VAR-default}, ${VAR:?error}, ${VAR?error}.
REFERENCE = re.compile(r"\$\{(?P<name>\w+)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}")
REQUIRED = re.compile(r"^\$\{(?P<name>\w+):\?[^}]+\}$")
SECRET_NAME = re.compile(r"PASSWORD|SECRET|TOKEN|BASIC_AUTH|CREDENTIAL|_KEY$")
URL_PASSWORD = re.compile(r"^[a-z][a-z0-9+.\-]*://[^:/@]+:(?P<password>.+)@[^@]+$")


class Missing(Exception):
    """A variable compose requires (``${VAR:?...}``) is not set: compose refuses to start."""


def interpolate(text: str, env: dict[str, str]) -> str:
    """``text`` as compose resolves it with ``env`` (the .env file)."""

    def value(match: re.Match[str]) -> str:
        name, op, arg = match["name"], match["op"], match["arg"]
        given = env.get(name)
        if op in (":-", ":?") and not given:
            given = None
        if given is not None:
            return given
        if op is not None and op.endswith("?"):
            raise Missing(f"{name}: {arg}")
        return arg if op is not None else ""

    return REFERENCE.sub(value, text.replace("$$", "\0")).replace("\0", "$")


def env_file(path: Path) -> dict[str, str]:
    """``NAME=value`` lines of an env file (comments and blank lines skipped)."""
    lines = [line.strip() for line in path.read_text().splitlines()]
    pairs = [line.split("=", 1) for line in lines if line and not line.startswith("#")]
    return {name.strip(): value.strip() for name, value in pairs}


@pytest.fixture(scope="module")
def compose() -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
    return loaded


@pytest.fixture(scope="module")
def example() -> dict[str, str]:
    """The committed .env.example: what an operator copies to .env."""
    return env_file(ROOT / ".env.example")


def published(service: dict[str, Any], env: dict[str, str]) -> list[tuple[str, str, str]]:
    """(host address, host port, container port) of each port the service publishes."""
    found = []
    for entry in service.get("ports", []):
        if isinstance(entry, dict):
            found.append((entry.get("host_ip", ""), str(entry["published"]), str(entry["target"])))
            continue
        parts = interpolate(str(entry), env).rsplit(":", 2)
        host, port, target = [""] * (3 - len(parts)) + parts
        found.append((host, port, target))
    return found


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
    assert dockerfile.index("-r /tmp/requirements.lock") < dockerfile.index("COPY models")


def test_workers_scale_and_report_their_health(compose: dict[str, Any]) -> None:
    worker = compose["services"]["worker"]
    assert "ports" not in worker, "a fixed host port stops --scale worker=2"
    assert "inspect ping" in " ".join(worker["healthcheck"]["test"])


def test_a_stopped_worker_is_given_time_to_finish_its_steps(compose: dict[str, Any]) -> None:
    # Compose kills a container 10 s after asking it to stop: a step running at a redeploy
    # would be cut, its run left to the reaper and an effect it had made to a repair
    grace = compose["services"]["worker"]["stop_grace_period"]
    number, unit = int(grace[:-1]), grace[-1]
    assert number * {"s": 1, "m": 60, "h": 3600}[unit] >= 600


# Who gets which database role: the processes that write runs get interlude's; the exporter
# a read-only role of its own; beat and Flower only talk to the broker.
WRITERS = {"migrate", "worker", "maintenance", "web"}
READERS = {"metrics": "interlude_metrics"}


def test_settings_in_the_stack_are_ones_interlude_reads(compose: dict[str, Any]) -> None:
    known = {f"INTERLUDE_{name.upper()}" for name in Settings.model_fields}
    for name in OUR_SERVICES:
        env = compose["services"][name]["environment"]
        unknown = {key for key in env if key.startswith("INTERLUDE_")} - known
        assert not unknown, f"{name}: interlude does not read {sorted(unknown)}"
        # The broker is the stack's Redis
        assert env["INTERLUDE_BROKER_URL"].startswith("redis://redis:6379")
        # The database, where needed, is the stack's PostgreSQL through psycopg 3
        url = env.get("INTERLUDE_DATABASE_URL")
        if name in WRITERS:
            assert url is not None and url.startswith("postgresql+psycopg://interlude:"), name
        elif name in READERS:
            assert url is not None and url.startswith(f"postgresql+psycopg://{READERS[name]}:")
        else:
            assert url is None, f"{name} needs no database and gets its password"
            continue
        assert "@postgres:5432/" in url
        for module in env["INTERLUDE_FLOWS"].split(","):
            assert (ROOT / Path(*module.split(".")).with_suffix(".py")).is_file(), module
    metrics = compose["services"]["metrics"]
    port = command_of(metrics)[command_of(metrics).index("--port") + 1]
    assert ("127.0.0.1", port, port) in published(metrics, {})
    # In its container it listens on every interface, so the published port reaches it.
    listens = metrics["environment"].get("INTERLUDE_METRICS_HOST")
    if "--host" in command_of(metrics):
        listens = command_of(metrics)[command_of(metrics).index("--host") + 1]
    assert listens == "0.0.0.0"


def test_the_web_inbox_listens_on_its_published_port(compose: dict[str, Any]) -> None:
    web = compose["services"]["web"]
    assert command_of(web)[:2] == ["interlude", "serve"]
    env = web["environment"]
    # Reachable from outside its container, on the port the stack publishes.
    assert env["INTERLUDE_WEB_HOST"] == "0.0.0.0"
    port = env["INTERLUDE_WEB_PORT"]
    assert ("127.0.0.1", port, port) in published(web, {})
    assert f":{port}" in env["INTERLUDE_WEB_BASE_URL"]
    assert f":{port}/healthz" in " ".join(web["healthcheck"]["test"])


def test_the_migration_runs_before_the_processes(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("worker", "maintenance", "beat", "flower", "metrics", "web"):
        condition = services[name]["depends_on"]["migrate"]["condition"]
        assert condition == "service_completed_successfully"
    assert services["migrate"]["depends_on"]["postgres"]["condition"] == "service_healthy"


@pytest.mark.parametrize("name", sorted(OUR_SERVICES))
def test_every_command_is_one_the_project_has(
    compose: dict[str, Any], example: dict[str, str], name: str, tmp_path: Path
) -> None:
    service = compose["services"][name]
    command = command_of(service)
    env = {k: interpolate(str(v), example) for k, v in service["environment"].items()}
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


def test_published_ports_listen_on_this_machine_unless_the_env_file_says(
    compose: dict[str, Any],
) -> None:
    ports = {
        name: published(service, {})
        for name, service in compose["services"].items()
        if service.get("ports")
    }
    assert set(ports) == {"flower", "metrics", "web"}
    for name, found in ports.items():
        for host, port, _target in found:
            assert host == "127.0.0.1", f"{name} publishes {port} on {host or 'every interface'}"
    # One setting in .env opens them all, deliberately.
    opened = published(compose["services"]["flower"], {"PUBLISH_HOST": "0.0.0.0"})
    assert opened == [("0.0.0.0", "5555", "5555")]


def test_flower_asks_for_the_password_of_the_env_file(
    compose: dict[str, Any], example: dict[str, str]
) -> None:
    flower = compose["services"]["flower"]
    command = command_of(flower)
    given = [part.split("=", 1)[1] for part in command if part.startswith("--basic-auth=")]
    env = flower["environment"]
    value = given[0] if given else env.get("FLOWER_BASIC_AUTH")
    assert value is not None, "Flower runs without authentication"
    # Written nowhere in the compose file: required from .env, so a missing one stops compose.
    required = REQUIRED.match(str(value))
    assert required is not None, f"Flower's credentials are written in the compose file: {value}"
    with pytest.raises(Missing):
        interpolate(str(value), {})
    user, _, password = interpolate(str(value), example).partition(":")
    assert user and password, "FLOWER_BASIC_AUTH in .env.example is not user:password"
    assert "FLOWER_UNAUTHENTICATED_API" not in env


def test_no_secret_is_written_in_the_compose_file(
    compose: dict[str, Any], example: dict[str, str]
) -> None:
    needed: set[str] = set()
    for name, service in compose["services"].items():
        assert "env_file" not in service or service["env_file"] == ".env", name
        for key, raw in (service.get("environment") or {}).items():
            value = str(raw)
            url = URL_PASSWORD.match(value)
            if SECRET_NAME.search(key):
                secret = REQUIRED.match(value)
            elif url is not None:
                secret = REQUIRED.match(url["password"])
            else:
                continue
            assert secret is not None, f"{name}: {key} is written in the compose file"
            needed.add(secret["name"])
    assert {"POSTGRES_PASSWORD", "FLOWER_BASIC_AUTH"} <= needed
    # Every secret the stack needs is one the example names; the real .env is never committed.
    assert needed <= set(example), sorted(needed - set(example))
    assert ".env" in (ROOT / ".gitignore").read_text().split()
    assert ".env" in (ROOT / ".dockerignore").read_text().split()
    # The processes reach PostgreSQL with the very password PostgreSQL was given.
    url = interpolate(
        compose["services"]["worker"]["environment"]["INTERLUDE_DATABASE_URL"], example
    )
    postgres = compose["services"]["postgres"]["environment"]["POSTGRES_PASSWORD"]
    assert f":{interpolate(postgres, example)}@postgres:" in url


def test_metrics_listen_on_this_machine_unless_configured(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings.model_fields["metrics_host"].default == "127.0.0.1"
    monkeypatch.setenv("INTERLUDE_METRICS_HOST", "0.0.0.0")
    assert Settings().metrics_host == "0.0.0.0"


def test_every_queue_has_a_worker_and_the_maintenance_queue_its_own(
    compose: dict[str, Any],
) -> None:
    from beat_schedule import beat_schedule
    from worker.app import app
    from worker.engine.tasknames import QUEUE_MAINTENANCE, QUEUE_NOTIFY, QUEUE_RESUMES, QUEUE_STEPS

    def queues(name: str) -> set[str]:
        command = command_of(compose["services"][name])
        return set(command[command.index("-Q") + 1].split(","))

    # Every queue interlude publishes to is consumed; beat's tasks never wait behind steps
    everything = {QUEUE_STEPS, QUEUE_RESUMES, QUEUE_MAINTENANCE, QUEUE_NOTIFY}
    assert {queue.name for queue in app.conf.task_queues} == everything
    assert queues("worker") | queues("maintenance") == everything
    # The notifiers run on the step workers, a prefork pool: there their time limit holds
    assert QUEUE_NOTIFY in queues("worker")
    assert not {"-P", "--pool"} & set(command_of(compose["services"]["worker"]))
    assert queues("maintenance") == {entry["options"]["queue"] for entry in beat_schedule.values()}
    assert not queues("worker") & queues("maintenance")


def test_servers_restart_keep_their_data_and_every_image_is_pinned(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ("redis", "postgres", *sorted(OUR_SERVICES - {"migrate"})):
        assert services[name]["restart"] == "unless-stopped", name
    # Redis keeps its queues across a restart (append-only file on a volume)
    redis = services["redis"]
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert any(volume.endswith(":/data") for volume in redis["volumes"])
    # Servers and the image's base at a release, not a moving tag
    release = re.compile(r":\d+\.\d+(\.\d+)?(-[a-z]+)?$")
    for name in ("redis", "postgres"):
        assert release.search(services[name]["image"]), services[name]["image"]
    base = re.search(r"^FROM\s+(\S+)", (ROOT / "Dockerfile").read_text(), re.M)
    assert base is not None and release.search(base.group(1)), base
    # ... and the image's packages pinned, every one the project depends on among them
    lock = (ROOT / "deploy" / "requirements.lock").read_text().splitlines()
    pinned = {
        line.split("==")[0] for line in lock if line and not line.startswith("#") and "==" in line
    }
    assert all("==" in line for line in lock if line and not line.startswith("#"))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    for requirement in declared:
        name = re.split(r"[\[<>=!~ ]", requirement, maxsplit=1)[0].lower().replace("_", "-")
        assert name in pinned, requirement


def test_every_long_running_process_has_a_healthcheck(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in sorted(set(services) - {"migrate"}):
        assert services[name].get("healthcheck", {}).get("test"), name
    # Beat's reads the alive file its scheduler touches (worker.ops.beat_scheduler)
    beat = " ".join(services["beat"]["healthcheck"]["test"])
    schedule = command_of(services["beat"])[command_of(services["beat"]).index("--schedule") + 1]
    assert f"{schedule}.alive" in beat
    assert "/healthcheck" in " ".join(services["flower"]["healthcheck"]["test"])
    assert ":9808/metrics" in " ".join(services["metrics"]["healthcheck"]["test"])


def test_beat_s_healthcheck_fails_on_an_alive_file_gone_stale(
    compose: dict[str, Any], tmp_path: Path
) -> None:
    test = compose["services"]["beat"]["healthcheck"]["test"]
    assert test[:2] == ["CMD", "python"]
    schedule = "/home/interlude/celerybeat-schedule"
    alive = tmp_path / "celerybeat-schedule.alive"
    argv = [
        sys.executable,
        *[part.replace(schedule, str(tmp_path / "celerybeat-schedule")) for part in test[2:]],
    ]

    def healthy() -> bool:
        return subprocess.run(argv, capture_output=True, timeout=30).returncode == 0

    assert not healthy()  # beat never ticked
    alive.touch()
    assert healthy()
    os.utime(alive, (0, 0))  # beat stopped ticking long ago
    assert not healthy()
