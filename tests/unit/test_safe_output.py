"""Caller-supplied text cannot forge a line of the command's output or of a log (issue 11 E):
control characters, separators and bidi/zero-width format characters are printed escaped,
in tables, timelines, error lines and text log lines; JSON stays exact JSON."""

from __future__ import annotations

import io
import json
import logging
import sys
import unicodedata
from collections.abc import Iterator

import pytest

from models.settings import reset_settings
from worker.cli.output import Output, error, note, set_json_errors
from worker.ops import runlog
from worker.present.safetext import UNSAFE_CATEGORIES, escape_controls

FORGED = (
    "\x1b[2J\x1b[H\r\n2026-12-01 08:00:00.000  resume accepted  human:ada  approved"
    "\u202e\u2066\u200b\x85\x9b31m\x07\x00\u2028"
)
FORGED_LOG = (
    "stale\n[2026-12-01 08:00:00,000: INFO/MainProcess] resume accepted: approved by human:ada"
)


def _unsafe(text: str) -> list[str]:
    return [c for c in text if unicodedata.category(c) in UNSAFE_CATEGORIES and c != "\n"]


def test_every_control_separator_and_format_character_is_escaped() -> None:
    # Given every code point whose category is a control, a format character or a separator
    unsafe = "".join(
        chr(p)
        for p in range(sys.maxunicode + 1)
        if unicodedata.category(chr(p)) in UNSAFE_CATEGORIES
    )
    # When it is escaped, none is left, and each is written as a readable escape
    shown = escape_controls(unsafe)
    assert not _unsafe(shown) and "\n" not in shown
    assert escape_controls("\x1b[31m\r\n\t\u202e\U000e0041") == (
        "\\x1b[31m\\r\\n\\t\\u202e\\U000e0041"
    )
    # And printable text, accents, scripts and emoji are left as they are
    for text in ("plain ascii ~!@#$%^&*()", "café Ünïcödé", "日本語のテキスト", "ship it 🚀"):
        assert escape_controls(text) == text


@pytest.fixture()
def stdout(capsys: pytest.CaptureFixture[str]) -> Iterator[pytest.CaptureFixture[str]]:
    set_json_errors(False)
    yield capsys
    set_json_errors(False)


def test_tables_pairs_lines_and_blocks_print_caller_text_escaped(
    stdout: pytest.CaptureFixture[str],
) -> None:
    out = Output(wide=True)
    # When caller-supplied text reaches each kind of human output
    out.table(["at", "what", "detail"], [("12:00", "resume malformed", f"attempt 7: {FORGED}")])
    out.pairs([("started by", FORGED), (FORGED, "key")])
    out.line(f"waiting on {FORGED}")
    out.block("evidence", {"note": FORGED, FORGED: 1})
    printed = stdout.readouterr().out

    # Then no control, bidi or separator character reaches the terminal
    assert not _unsafe(printed), [hex(ord(c)) for c in _unsafe(printed)]
    # And no line starts with the forged text: it stays inside its row
    lines = printed.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("2026-12-01")], printed
    assert "\\x1b[2J" in printed and "\\u202e" in printed


@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85", "\x1c", "\x1e"])
def test_a_separator_in_a_block_cannot_start_a_line_of_its_own(
    stdout: pytest.CaptureFixture[str], separator: str
) -> None:
    # Given evidence holding a line separator and a forged line after it (issue 42, finding 5)
    forged = "resume accepted by human:ceo"
    Output().block("evidence", {"note": f"fine{separator}{forged}"})
    printed = stdout.readouterr().out
    # Then the separator is printed escaped, and the forged text stays inside its line
    lines = printed.split("\n")
    assert not [line for line in lines if line.lstrip().startswith(forged)], printed
    assert separator not in printed


def test_an_error_line_is_one_escaped_line_and_json_errors_stay_json(
    stdout: pytest.CaptureFixture[str],
) -> None:
    # When a failure quotes caller text, on a terminal and under --json
    assert error(f"no run {FORGED}", 3) == 3
    note(f"following {FORGED}")
    text = stdout.readouterr().err
    set_json_errors(True)
    error(f"no run {FORGED}", 3)
    as_json = stdout.readouterr().err

    # Then each is one line, escaped, and the JSON is exact
    lines = text.splitlines()
    assert len(lines) == 2 and lines[0].startswith("interlude: error: no run \\x1b[2J")
    assert not _unsafe(text)
    (line,) = as_json.splitlines()
    assert json.loads(line) == {"error": " ".join(f"no run {FORGED}".split()), "exit": 3}


def test_json_output_is_exact_json(stdout: pytest.CaptureFixture[str]) -> None:
    Output(as_json=True).json({"reason": FORGED})
    printed = stdout.readouterr().out
    assert json.loads(printed) == {"reason": FORGED}
    assert "\x1b" not in printed


@pytest.fixture()
def log() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("interlude-test-safe-log")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.handlers[0].setFormatter(logging.Formatter("%(levelname)s %(message)s"))
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, stream
    runlog.clear()
    reset_settings()


def test_text_log_lines_cannot_be_forged(
    log: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = log
    monkeypatch.delenv("INTERLUDE_LOG_FORMAT", raising=False)
    reset_settings()
    runlog.install(logger)

    # When caller text reaches a message, its arguments (%s and %r), a run id and an exception
    logger.info("resume attempt %d: %s", 7, FORGED_LOG, extra={"run_id": f"r%s\n{FORGED}"})
    logger.warning("given %r", FORGED_LOG)
    logger.warning(FORGED_LOG)
    try:
        try:
            raise KeyError(FORGED_LOG)
        except KeyError as inner:
            raise ValueError(f"bad value {FORGED_LOG}") from inner
    except ValueError:
        logger.exception("resume failed")
    printed = stream.getvalue()

    # Then nothing forged a line: every line is one of ours (a record or a traceback line)
    lines = printed.splitlines()
    assert not [ln for ln in lines if ln.startswith("[2026")], printed
    assert not _unsafe(printed)
    assert lines[0] == (
        "INFO resume attempt 7: stale\\n[2026-12-01 08:00:00,000: INFO/MainProcess] resume "
        "accepted: approved by human:ada [run r%s\\n" + escape_controls(FORGED) + "]"
    )
    assert lines[1].startswith("WARNING given 'stale\\n[2026")
    assert lines[2].startswith("WARNING stale\\n[2026")
    # And the traceback keeps its frames and chain, each exception's message on one line
    assert "Traceback (most recent call last):" in printed
    assert "The above exception was the direct cause of the following exception:" in printed
    assert [ln for ln in lines if ln.startswith("ValueError: bad value stale\\n[2026")]
    assert [ln for ln in lines if ln.startswith("KeyError: ")]


def test_json_log_lines_keep_the_exact_value(
    log: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = log
    monkeypatch.setenv("INTERLUDE_LOG_FORMAT", "json")
    reset_settings()
    runlog.install(logger)
    logger.info("resume attempt %d: %s", 7, "stale", extra={"reason": FORGED_LOG})
    (line,) = stream.getvalue().splitlines()
    assert json.loads(line)["reason"] == FORGED_LOG


def test_uvicorn_logging_config_escapes_every_handler() -> None:
    from uvicorn.config import LOGGING_CONFIG

    config = runlog.escaped_config(LOGGING_CONFIG)
    assert set(config["handlers"]) == set(LOGGING_CONFIG["handlers"])
    assert all("escape" in h["filters"] for h in config["handlers"].values())
    logging.config.dictConfig(config)
    handler = logging.getLogger("uvicorn.access").handlers[0]
    assert any(isinstance(f, runlog.EscapeControls) for f in handler.filters)


def test_the_access_log_redacts_a_credential_sent_in_a_url(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Given uvicorn's logging as interlude serve configures it (issue 42, finding 10)
    from uvicorn.config import LOGGING_CONFIG

    logging.config.dictConfig(runlog.escaped_config(LOGGING_CONFIG))
    credential = "ilc_" + "k9-Q" * 11
    # When a request's URL carries a credential in its query
    logging.getLogger("uvicorn.access").info(
        '%s - "%s %s HTTP/%s" %d',
        "127.0.0.1:50000",
        "GET",
        f"/v1/interrupts?token={credential}",
        "1.1",
        401,
    )
    # Then the access log line names the request, not the credential
    logged = capsys.readouterr()
    line = logged.out + logged.err
    assert "GET /v1/interrupts?token=ilc_[redacted] HTTP/1.1" in line
    assert credential not in line
