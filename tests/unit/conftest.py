"""Fixtures of the unit tests (no service)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from models.settings import reset_settings


@pytest.fixture()
def no_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A database URL whose file must still not exist when the command has failed."""
    path = tmp_path / "untouched.db"
    monkeypatch.setenv("INTERLUDE_DATABASE_URL", f"sqlite:///{path}")
    reset_settings()
    yield path
    reset_settings()
