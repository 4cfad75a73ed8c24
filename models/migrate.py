"""Alembic, driven from code: ``interlude db upgrade`` and the tests call these."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from models.settings import get_settings

MIGRATIONS = Path(__file__).parent / "migrations"


def alembic_config(url: str | None = None) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    # Percent signs in a URL would be read as interpolation by configparser.
    config.set_main_option(
        "sqlalchemy.url", (url or get_settings().database_url).replace("%", "%%")
    )
    return config


def upgrade(url: str | None = None, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def current_head() -> str:
    from alembic.script import ScriptDirectory

    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    return head or ""
