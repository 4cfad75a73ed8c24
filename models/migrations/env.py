"""Alembic environment: runs migrations on the engine interlude itself would use."""

from __future__ import annotations

from alembic import context

from models.db import make_engine
from models.tables import Base

config = context.config
url = config.get_main_option("sqlalchemy.url") or ""
# The upgrade is what makes a new embedded database (and its folder).
engine = make_engine(url, create=True)
with engine.connect() as connection:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        # SQLite cannot ALTER most things in place; batch mode copies the table instead.
        render_as_batch=connection.dialect.name == "sqlite",
        compare_type=True,
    )
    with context.begin_transaction():
        context.run_migrations()
engine.dispose()
