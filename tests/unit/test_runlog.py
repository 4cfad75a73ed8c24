"""Log lines about a run carry its id, flow and step, as text or as JSON objects."""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Iterator

import pytest

from models.settings import reset_settings
from worker.ops import runlog


@pytest.fixture()
def captured(monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[logging.Logger, io.StringIO]]:
    stream = io.StringIO()
    logger = logging.getLogger("interlude-test-runlog")
    logger.handlers = [logging.StreamHandler(stream)]
    logger.propagate = False
    logger.setLevel(logging.INFO)
    yield logger, stream
    runlog.clear()
    reset_settings()


def test_text_lines_name_the_run_flow_and_step(
    captured: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = captured
    monkeypatch.delenv("INTERLUDE_LOG_FORMAT", raising=False)
    reset_settings()
    runlog.install(logger)
    runlog.bind("r-42", "procurement", "certify")
    logger.warning("step %s failed (attempt %d)", "certify", 3)
    runlog.clear()
    logger.info("nothing about a run")
    lines = stream.getvalue().splitlines()
    assert lines == [
        "step certify failed (attempt 3) [run r-42, flow procurement, step certify]",
        "nothing about a run",
    ]


def test_json_lines_are_objects_with_the_run_fields(
    captured: tuple[logging.Logger, io.StringIO], monkeypatch: pytest.MonkeyPatch
) -> None:
    logger, stream = captured
    monkeypatch.setenv("INTERLUDE_LOG_FORMAT", "json")
    reset_settings()
    runlog.install(logger)
    runlog.bind("r-7", "deploy_gate", "approve")
    logger.error("run failed for good", extra={"action": "run_failed"})
    (line,) = stream.getvalue().splitlines()
    record = json.loads(line)
    assert record["message"] == "run failed for good"
    assert (record["run_id"], record["flow"], record["step"]) == ("r-7", "deploy_gate", "approve")
    assert (record["levelname"], record["action"]) == ("ERROR", "run_failed")


def test_an_unknown_log_format_is_a_one_line_configuration_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from models.errors import ConfigurationError
    from models.settings import get_settings

    monkeypatch.setenv("INTERLUDE_LOG_FORMAT", "xml")
    reset_settings()
    with pytest.raises(ConfigurationError, match="INTERLUDE_LOG_FORMAT='xml'"):
        get_settings()
    reset_settings()
