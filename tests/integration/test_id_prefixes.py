"""Ids as operators type them: unique prefixes resolve, ambiguous ones name the candidates."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from models import runs as run_store
from models.errors import AmbiguousIdError, InvalidInputError, RunNotFoundError
from worker import enqueue_run
from worker.cli import main
from worker.present.ids import resolve_run_id

FIRST = "abcdef01" + "0" * 24
SECOND = "abcdef02" + "0" * 24


@pytest.fixture()
def two_alike(db: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, str]]:
    """Two runs whose ids share their first six characters."""
    # Each run takes a new id, then its initial checkpoint another.
    ids = iter([FIRST, uuid.uuid4().hex, SECOND, uuid.uuid4().hex])
    monkeypatch.setattr(run_store, "new_id", lambda: next(ids, None) or uuid.uuid4().hex)
    first = enqueue_run("quick", {})
    second = enqueue_run("quick", {})
    yield first, second


def test_a_unique_prefix_is_the_whole_id(two_alike: tuple[str, str]) -> None:
    assert two_alike == (FIRST, SECOND)
    assert resolve_run_id("abcdef01") == FIRST
    assert resolve_run_id("ABCDEF02") == SECOND
    assert resolve_run_id(FIRST) == FIRST


def test_an_ambiguous_or_short_prefix_is_refused_naming_why(
    two_alike: tuple[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(AmbiguousIdError) as ambiguous:
        resolve_run_id("abcdef")
    assert FIRST in str(ambiguous.value) and SECOND in str(ambiguous.value)
    with pytest.raises(InvalidInputError, match="at least 6 characters"):
        resolve_run_id("abc")
    with pytest.raises(RunNotFoundError):
        resolve_run_id("abcdef9")

    # Through the command: exit 2, one line naming both candidates
    assert main(["runs", "show", "abcdef"]) == 2
    err = capsys.readouterr().err
    assert len(err.splitlines()) == 1 and FIRST in err and SECOND in err
