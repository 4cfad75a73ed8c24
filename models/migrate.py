"""Alembic, driven from code: ``interlude db upgrade|current|history|check`` and the tests."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from models.db import database_exists, make_engine
from models.settings import get_settings

MIGRATIONS = Path(__file__).parent / "migrations"


@dataclass(frozen=True)
class Revision:
    id: str
    down_revision: str | None
    message: str


@dataclass(frozen=True)
class SchemaStatus:
    """Where the database is against the newest migration this code ships."""

    current: str | None  # None: no interlude schema at all
    head: str
    known: frozenset[str] = frozenset()  # every revision this code ships

    @property
    def up_to_date(self) -> bool:
        return self.current == self.head


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
    head = ScriptDirectory.from_config(alembic_config()).get_current_head()
    return head or ""


def database_revision(url: str | None = None) -> str | None:
    """The revision the database is at; None when it has no interlude schema."""
    url = url or get_settings().database_url
    if not database_exists(url):
        return None  # asked, not made: only the upgrade creates a database
    engine = make_engine(url)
    try:
        with engine.connect() as connection:
            return MigrationContext.configure(connection).get_current_revision()
    finally:
        engine.dispose()


def schema_status(url: str | None = None) -> SchemaStatus:
    known = frozenset(revision.id for revision in history())
    return SchemaStatus(current=database_revision(url), head=current_head(), known=known)


def history() -> list[Revision]:
    """Every migration, newest first."""
    script = ScriptDirectory.from_config(alembic_config())
    return [
        Revision(
            id=rev.revision,
            down_revision=_one(rev.down_revision),
            message=(rev.doc or "").strip(),
        )
        for rev in script.walk_revisions()
    ]


def _one(down: str | list[str] | tuple[str, ...] | None) -> str | None:
    if isinstance(down, list | tuple):
        return ",".join(down)
    return down
