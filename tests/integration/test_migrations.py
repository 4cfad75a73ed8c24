"""``upgrade head`` produces exactly the schema the models declare, on both backends."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from models.db import get_engine
from models.migrate import current_head
from models.tables import Base


def _ours(name: str | None, type_: str, parent_names: object) -> bool:
    # The example flows keep their own records (example_*) in the same database.
    return not (type_ == "table" and name is not None and name.startswith("example_"))


def test_upgrade_head_matches_the_models(database_url: str) -> None:
    # The session fixture already ran `upgrade head` on this database.
    engine = get_engine(database_url)
    with engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": True, "include_name": _ours}
        )
        assert context.get_current_revision() == current_head()
        diff = compare_metadata(context, Base.metadata)
    assert diff == []
