"""``interlude metrics`` that cannot listen: one line naming HOST:PORT, and no "serving" before."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.cli import main
from worker.cli.exits import FAILURE


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("interlude: error: ")
    return lines[0]


@pytest.fixture()
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


def test_metrics_on_a_port_in_use_is_one_line_naming_where(
    port_in_use: int, no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(["metrics", "--host", "127.0.0.1", "--port", str(port_in_use)])
    line = _one_error_line(capsys)
    assert status == FAILURE, line
    assert f"cannot serve on 127.0.0.1:{port_in_use}: " in line
    assert "in use" in line.lower()


def test_metrics_on_a_host_that_does_not_resolve_blames_the_host_not_the_port(
    no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (999.1.1.1 printed "serving … on 999.1.1.1:9999", then "cannot serve on port 9999")
    status = main(["metrics", "--host", "not-a-host.invalid", "--port", "9999"])
    line = _one_error_line(capsys)
    assert status == FAILURE, line
    assert line.startswith("interlude: error: cannot serve on not-a-host.invalid:9999: ")
