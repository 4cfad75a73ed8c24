"""Arguments the command refuses while parsing, and a ``serve`` that cannot start.

Bytes that are not UTF-8 reach Python as lone surrogates ("surrogateescape"): every text
argument is refused in one line naming the option, before a database is opened.
"""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from worker.cli import build_parser, main
from worker.cli.exits import BAD_INPUT, FAILURE, INTERRUPTED, CliError
from worker.cli.inputs import parse_json

# b"\xff" on a command line, as Python hands it over.
BAD_BYTE = b"\xff".decode("utf-8", "surrogateescape")
BAD_ID = BAD_BYTE * 6


def _one_error_line(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.splitlines()
    assert len(lines) == 1, captured.err
    assert lines[0].startswith("interlude: error: ")
    return lines[0]


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["runs", "start", "approval", "--idempotency-key", f"key{BAD_BYTE}"], "--idempotency-key"),
        (["runs", "start", "approval", "--started-by", f"a{BAD_BYTE}"], "--started-by"),
        (["runs", "start", "approval", "--input", f'{{"a":"{BAD_BYTE}"}}'], "--input"),
        (["runs", "start", f"ref{BAD_BYTE}und"], "FLOW"),
        (
            ["runs", "cancel", "abcdef12", "--actor", "opal", "--reason", f"bad{BAD_BYTE}byte"],
            "--reason",
        ),
        (["runs", "cancel", "abcdef12", "--actor", f"op{BAD_BYTE}al"], "--actor"),
        (["runs", "list", "--flow", f"ref{BAD_BYTE}und"], "--flow"),
        (["runs", "list", f"--started-by=a{BAD_BYTE}"], "--started-by"),
        (["runs", "list", "--state", BAD_BYTE], "--state"),
        (["runs", "show", BAD_ID], "RUN_ID"),
        (["interrupts", "show", BAD_ID], "INTERRUPT_ID"),
        (["resume", BAD_ID, "--actor", "a", "--decision", "approved"], "INTERRUPT_ID"),
        (["resume", "--contract", f"c{BAD_BYTE}.json", "--yes"], "--contract"),
        (["actors", "revoke", f"a{BAD_BYTE}"], "ID"),
        (["actors", "add", "bob", "--role", f"fin{BAD_BYTE}"], "--role"),
        (["serve", "--host", f"local{BAD_BYTE}host"], "--host"),
    ],
    ids=lambda value: value if isinstance(value, str) else None,
)
def test_an_argument_that_is_not_utf8_is_refused_naming_it(
    argv: list[str], names: str, no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # When an argument holds a byte that is not UTF-8
    status = main(argv)

    # Then it is bad input, one line naming the option, and no database was opened
    line = _one_error_line(capsys)
    assert status == BAD_INPUT, line
    assert f"argument {names}: " in line and "is not UTF-8 text" in line, line
    assert "\\udcff" in line  # shown escaped, as Python writes it
    assert not no_database.exists()


def test_json_errors_for_such_an_argument_are_json_too(
    no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--json", "runs", "list", "--flow", BAD_BYTE]) == BAD_INPUT
    captured = capsys.readouterr()
    (line,) = captured.err.splitlines()
    assert json.loads(line)["exit"] == BAD_INPUT
    assert "--flow" in json.loads(line)["error"]
    assert not no_database.exists()


def test_inline_input_and_input_from_a_file_refuse_the_same_bytes(tmp_path: Path) -> None:
    # The same bytes, given inline or in a file, are refused alike (inline ones were stored
    # as "\udcff" on SQLite).
    raw = b'{"a":"\xff"}'
    path = tmp_path / "input.json"
    path.write_bytes(raw)
    for source in (raw.decode("utf-8", "surrogateescape"), f"@{path}"):
        with pytest.raises(CliError, match=r"^--input\b.*is not UTF-8 text$"):
            parse_json(source, "--input")


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["runs", "list", "--limit", "-1"], "must be a whole number from 1 to 100000"),
        (["runs", "list", "--limit", "1.5"], "must be a whole number from 1 to 100000"),
        (["runs", "list", "--limit", "0"], "must be a whole number from 1 to 100000"),
        (
            ["purge", "--finished-before", "2020-01-01", "--batch", "-1"],
            "--batch: '-1' must be a whole number from 1 to",
        ),
    ],
)
def test_a_count_out_of_range_says_what_range(
    argv: list[str], says: str, no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == BAD_INPUT
    line = _one_error_line(capsys)
    assert says in line, line
    assert "is not a whole number" not in line


def test_help_lists_every_exit_status_including_interrupted() -> None:
    text = build_parser().format_help()
    assert f"  {INTERRUPTED:<3} interrupted" in text
    # After the others, in order.
    assert text.rstrip().splitlines()[-1].lstrip().startswith(str(INTERRUPTED))


@pytest.fixture()
def port_in_use() -> Iterator[int]:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        yield taken.getsockname()[1]


@pytest.mark.parametrize("verb", ["serve", "metrics"])
def test_serving_on_a_port_in_use_is_one_line_and_a_failure(
    verb: str, port_in_use: int, no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # When the port is taken (serve: uvicorn printed four lines and exited 3, "not found")
    status = main([verb, "--host", "127.0.0.1", "--port", str(port_in_use)])

    # Then one line names where and why, and the status is failure
    line = _one_error_line(capsys)
    assert status == FAILURE, line
    assert f"cannot serve on 127.0.0.1:{port_in_use}: " in line
    assert "in use" in line.lower()


@pytest.mark.parametrize("verb", ["serve", "metrics"])
def test_serving_on_a_host_that_does_not_resolve_is_one_line_naming_the_host(
    verb: str, no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # (metrics printed "serving … on 999.1.1.1:9999", then "cannot serve on port 9999")
    status = main([verb, "--host", "not-a-host.invalid", "--port", "8000"])
    line = _one_error_line(capsys)
    assert status == FAILURE, line
    assert line.startswith("interlude: error: cannot serve on not-a-host.invalid:8000: ")


def test_a_date_before_the_first_utc_date_is_bad_input(
    no_database: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 0001-01-01 at +14:00 is in the year 0 in UTC: an OverflowError traceback before
    assert main(["purge", "--finished-before", "0001-01-01T00:00:00+14:00"]) == BAD_INPUT
    assert "is not a date" in _one_error_line(capsys)
    assert not no_database.exists()
