"""Settings: every number has its range and the database URL a known scheme, checked where the
settings are read, so that each entry point refuses a bad value in one line before it acts."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import get_args

import pytest
from pydantic import ValidationError

from models.errors import ConfigurationError
from models.settings import ENV_PREFIX, Settings, get_settings, reset_settings

ROOT = Path(__file__).resolve().parents[2]
NUMERIC_FIELDS = [
    name
    for name, info in Settings.model_fields.items()
    if {int, float} & set(get_args(info.annotation) or (info.annotation,))
]


@pytest.fixture(autouse=True)
def fresh_settings() -> Iterator[None]:
    # Each case sets the environment; none may leave its settings to the next test.
    reset_settings()
    yield
    reset_settings()


def refusal(monkeypatch: pytest.MonkeyPatch, variable: str, value: str) -> str:
    monkeypatch.setenv(variable, value)
    reset_settings()
    with pytest.raises(ConfigurationError) as refused:
        get_settings()
    message = str(refused.value)
    assert "\n" not in message
    return message


def test_every_default_is_in_range() -> None:
    # Defaults are not validated unless given: give each one explicitly.
    defaults = {name: info.default for name, info in Settings.model_fields.items()}
    settings = Settings.model_validate(defaults)
    assert settings.sweep_interval == 5.0 and settings.web_port == 8000


def test_the_numeric_settings_are_the_expected_ones() -> None:
    # A new numeric setting lands here, and then in the range checks below.
    assert sorted(NUMERIC_FIELDS) == sorted(
        [
            "lease_seconds",
            "max_claims",
            "redispatch_after",
            "sweep_batch",
            "pause_expires_in",
            "metrics_port",
            "db_pool_size",
            "web_port",
            "web_session_seconds",
            "web_idle_seconds",
            "web_head_seconds",
            "sweep_interval",
            "reap_interval",
            "effect_margin",
            "effect_grace",
            "notify_timeout_seconds",
            "notify_retries",
            "notify_backoff",
            "notify_overdue_after",
            "link_seconds",
            "smtp_port",
        ]
    )


@pytest.mark.parametrize("field", NUMERIC_FIELDS)
def test_every_numeric_setting_is_bounded_both_ways_and_finite(field: str) -> None:
    kinds = get_args(Settings.model_fields[field].annotation) or (
        Settings.model_fields[field].annotation,
    )
    absurd: list[object] = [-(10**20), 10**20]
    if float in kinds:
        absurd += [float("nan"), float("inf"), float("-inf"), 1e308]
    for value in absurd:
        with pytest.raises(ValidationError):
            Settings.model_validate({field: value})


@pytest.mark.parametrize(
    ("variable", "value", "expected"),
    [
        # A nan or an overflowing duration broke the reaper with a traceback.
        ("INTERLUDE_REDISPATCH_AFTER", "nan", "a number above 0 and at most 3153600000"),
        ("INTERLUDE_REDISPATCH_AFTER", "inf", "a number above 0"),
        ("INTERLUDE_REDISPATCH_AFTER", "1e308", "a number above 0"),
        ("INTERLUDE_REDISPATCH_AFTER", "-5", "a number above 0"),
        ("INTERLUDE_LEASE_SECONDS", "0", "a number above 0"),
        ("INTERLUDE_PAUSE_EXPIRES_IN", "1e12", "a number above 0 and at most 3153600000"),
        # Zero or less made beat publish in a tight loop; so would a sliver of a second.
        ("INTERLUDE_SWEEP_INTERVAL", "0", "a number at least 0.1 and at most 3153600000"),
        ("INTERLUDE_SWEEP_INTERVAL", "-5", "a number at least 0.1"),
        ("INTERLUDE_SWEEP_INTERVAL", "nan", "a number at least 0.1"),
        ("INTERLUDE_SWEEP_INTERVAL", "0.001", "a number at least 0.1"),
        ("INTERLUDE_REAP_INTERVAL", "inf", "a number at least 0.1"),
        ("INTERLUDE_EFFECT_MARGIN", "-1", "a number at least 0 and at most 3153600000"),
        ("INTERLUDE_EFFECT_GRACE", "nan", "a number at least 0"),
        # -1 claims would fail a run the first time its lease was lost.
        ("INTERLUDE_MAX_CLAIMS", "-1", "a whole number at least 0 and at most 1000000, like 5"),
        ("INTERLUDE_SWEEP_BATCH", "0", "a whole number at least 1 and at most 1000000"),
        ("INTERLUDE_DB_POOL_SIZE", "0", "a whole number at least 1 and at most 10000"),
        ("INTERLUDE_WEB_PORT", "70000", "a whole number at least 1 and at most 65535"),
        ("INTERLUDE_WEB_PORT", "-1", "a whole number at least 1 and at most 65535"),
        ("INTERLUDE_METRICS_PORT", "-1", "a whole number at least 0 and at most 65535"),
        ("INTERLUDE_WEB_SESSION_SECONDS", "-1", "a whole number at least 1"),
        # A notify task must end (and a retry be due) within Redis's visibility timeout.
        ("INTERLUDE_NOTIFY_TIMEOUT_SECONDS", "0", "a number above 0 and at most 1500, like 5"),
        ("INTERLUDE_NOTIFY_TIMEOUT_SECONDS", "1600", "a number above 0 and at most 1500"),
        ("INTERLUDE_NOTIFY_RETRIES", "-1", "a whole number at least 0 and at most 100, like 5"),
        ("INTERLUDE_NOTIFY_RETRIES", "1000", "a whole number at least 0 and at most 100"),
        ("INTERLUDE_NOTIFY_BACKOFF", "nan", "a number at least 0 and at most 600"),
        ("INTERLUDE_NOTIFY_BACKOFF", "3600", "a number at least 0 and at most 600"),
        # A value of the wrong type says the same, range included.
        ("INTERLUDE_LEASE_SECONDS", "abc", "a number above 0 and at most 3153600000, like 5"),
        ("INTERLUDE_MAX_CLAIMS", "2.5", "a whole number at least 0"),
    ],
)
def test_a_number_out_of_its_range_is_one_line_naming_the_variable(
    variable: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = refusal(monkeypatch, variable, value)
    assert f"{variable}={value!r}: expected {expected}" in message, message


def test_the_bounds_themselves_are_accepted(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "SWEEP_INTERVAL": "0.1",
        "REAP_INTERVAL": "3153600000",
        "MAX_CLAIMS": "0",
        "SWEEP_BATCH": "1",
        "WEB_PORT": "65535",
        "METRICS_PORT": "0",
        "EFFECT_MARGIN": "0",
        "EFFECT_GRACE": "0",
        "REDISPATCH_AFTER": "0.5",
        "NOTIFY_TIMEOUT_SECONDS": "1500",
        "NOTIFY_RETRIES": "0",
        "NOTIFY_BACKOFF": "0",
    }.items():
        monkeypatch.setenv(f"{ENV_PREFIX}{name}", value)
    reset_settings()
    settings = get_settings()
    assert settings.sweep_interval == 0.1 and settings.max_claims == 0
    assert settings.web_port == 65535
    assert (settings.notify_timeout_seconds, settings.notify_retries) == (1500, 0)


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("bogus://x", "INTERLUDE_DATABASE_URL: unsupported database 'bogus'"),
        ("mysql+pymysql://app:s3cret@db/app", "unsupported database 'mysql'"),
        ("nonsense", "INTERLUDE_DATABASE_URL: expected a URL like postgresql://"),
        ("", "INTERLUDE_DATABASE_URL: expected a URL"),
        # SQLAlchemy could not read these: every command failed later with its traceback
        ("postgresql://u:s3cret@h:notaport/db", "INTERLUDE_DATABASE_URL: not a URL SQLAlchemy"),
        ("postgresql://[::1", "INTERLUDE_DATABASE_URL: not a URL SQLAlchemy can read"),
        ("postgresql://u:s3cret@h:99999/db", "INTERLUDE_DATABASE_URL: the port must be 1 to"),
    ],
)
def test_a_database_url_interlude_cannot_use_is_one_line(
    url: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    message = refusal(monkeypatch, "INTERLUDE_DATABASE_URL", url)
    assert says in message, message
    # The URL itself may hold a password: it is never echoed.
    assert "s3cret" not in message


@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///.interlude/interlude.db",
        "sqlite://",
        "postgresql://app:secret@db:5432/app",
        "postgres://app@db/app",
        "postgresql+psycopg://app@db/app",
    ],
)
def test_the_database_urls_interlude_uses_are_accepted(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", url)
    assert get_settings().database_url == url


@pytest.mark.parametrize(
    ("url", "says"),
    [
        ("bogus://app:s3cret@mq/", "INTERLUDE_BROKER_URL: unknown broker 'bogus'"),
        ("localhost:6379", "INTERLUDE_BROKER_URL: expected a URL like redis://"),
    ],
)
def test_a_broker_no_transport_serves_is_one_line(
    url: str, says: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before, the run was committed and every publish failed with a warning, exit 0
    monkeypatch.setenv("INTERLUDE_BROKER_URL", url)
    with pytest.raises(ConfigurationError) as refused:
        get_settings()
    message = str(refused.value)
    assert says in message and "\n" not in message
    assert "s3cret" not in message


@pytest.mark.parametrize(
    "url",
    ["redis://h:6379/0", "rediss://h/0", "amqp://u@h//", "filesystem://", "sqs://", "sentinel://h"],
)
def test_the_brokers_kombu_serves_are_accepted(url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("INTERLUDE_BROKER_URL", url)
    assert get_settings().broker_url == url


def test_a_url_given_directly_to_the_dialect_is_refused_as_configuration() -> None:
    from models.dialects import dialect_for

    with pytest.raises(ConfigurationError, match="unsupported database 'mysql'"):
        dialect_for("mysql://app@db/app")


@pytest.mark.parametrize(
    ("argv", "variable", "value", "says"),
    [
        (["runs", "list"], "INTERLUDE_DATABASE_URL", "bogus://x", "unsupported database"),
        (["stats"], "INTERLUDE_DATABASE_URL", "postgresql://u:pw@h:notaport/db", "not a URL"),
        (["db", "upgrade"], "INTERLUDE_DATABASE_URL", "postgresql://[::1", "not a URL"),
        (["runs", "start", "any"], "INTERLUDE_BROKER_URL", "bogus://x", "unknown broker"),
        (["reap"], "INTERLUDE_REDISPATCH_AFTER", "nan", "INTERLUDE_REDISPATCH_AFTER='nan'"),
        (["reap"], "INTERLUDE_MAX_CLAIMS", "-1", "INTERLUDE_MAX_CLAIMS='-1'"),
        (["reap"], "INTERLUDE_SWEEP_BATCH", "0", "INTERLUDE_SWEEP_BATCH='0'"),
    ],
)
def test_the_command_refuses_a_bad_setting_in_one_line_before_acting(
    argv: list[str],
    variable: str,
    value: str,
    says: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from worker.cli import main

    database = tmp_path / "interlude.db"
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", f"sqlite:///{database}")
    monkeypatch.setenv(variable, value)
    reset_settings()
    assert main(argv) == 1  # a configuration error (README: exit statuses)
    captured = capsys.readouterr()
    [line] = captured.err.strip().splitlines()
    assert line.startswith("interlude: error: configuration is invalid: ") and says in line
    # Nothing was done: no banner, no database file
    assert captured.out == ""
    assert not database.exists()


def run_program(program: str, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # A process of its own: before the fix, serve (and beat) went on running after the error.
    return subprocess.run(
        [str(Path(sys.executable).parent / program), *args],
        cwd=ROOT,
        env={**{k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_serve_refuses_a_port_that_does_not_exist_before_its_banner(tmp_path: Path) -> None:
    # Given INTERLUDE_WEB_PORT=70000 (uvicorn failed with a traceback after the banner)
    done = run_program(
        "interlude",
        "serve",
        env={
            "INTERLUDE_WEB_PORT": "70000",
            "INTERLUDE_DATABASE_URL": f"sqlite:///{tmp_path / 'interlude.db'}",
        },
    )
    # Then it exits 1 with one line naming the variable, and printed nothing else
    assert done.returncode == 1, done.stderr
    assert done.stdout == ""
    [line] = done.stderr.strip().splitlines()
    assert (
        "INTERLUDE_WEB_PORT='70000': expected a whole number at least 1 and at most 65535" in line
    )


def test_beat_refuses_an_interval_that_would_flood_the_broker(tmp_path: Path) -> None:
    # Given INTERLUDE_SWEEP_INTERVAL=0 (beat published sweeps in a tight loop)
    done = run_program(
        "celery",
        "-A",
        "worker",
        "beat",
        "-s",
        str(tmp_path / "schedule"),
        env={
            "INTERLUDE_SWEEP_INTERVAL": "0",
            "INTERLUDE_BROKER_URL": "filesystem://",
            "INTERLUDE_BROKER_FOLDER": str(tmp_path / "broker"),
            "INTERLUDE_DATABASE_URL": f"sqlite:///{tmp_path / 'interlude.db'}",
        },
    )
    # Then beat exits 1 with one line naming the variable, having published nothing
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("interlude: error:")]
    assert "INTERLUDE_SWEEP_INTERVAL='0': expected a number at least 0.1" in line
    assert not list((tmp_path / "broker").glob("queue/*"))


@pytest.mark.parametrize(
    "program",
    [("interlude", "serve"), ("celery", "-A", "worker", "worker", "-P", "solo")],
    ids=["serve", "worker"],
)
def test_serve_and_the_worker_refuse_a_database_url_sqlalchemy_cannot_read(
    program: tuple[str, ...], tmp_path: Path
) -> None:
    # Given a URL whose port is no number (both started, and failed at every use)
    done = run_program(
        *program,
        env={
            "INTERLUDE_DATABASE_URL": "postgresql://u:s3cret@h:notaport/db",
            "INTERLUDE_BROKER_URL": "filesystem://",
            "INTERLUDE_BROKER_FOLDER": str(tmp_path / "broker"),
        },
    )
    # Then each exits 1 at once with one line naming the variable, and not its password
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr and "s3cret" not in done.stderr
    [line] = [ln for ln in done.stderr.splitlines() if ln.startswith("interlude: error:")]
    assert "INTERLUDE_DATABASE_URL: not a URL SQLAlchemy can read" in line
