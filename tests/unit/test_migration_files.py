"""Migration files are named in the order they apply: ``0001_...``, ``0002_...``, following
each one's ``down_revision``. The revision ids inside never change (databases store them)."""

from __future__ import annotations

import re
from pathlib import Path

from alembic.script import ScriptDirectory

from models.migrate import MIGRATIONS, alembic_config

NUMBERED = re.compile(r"^(\d{4})_\w+\.py$")


def chain_files(script: ScriptDirectory) -> list[str]:
    """The migrations' file names from the first to apply to the last (one line, no branch)."""
    newest_first = list(script.walk_revisions())
    assert len(script.get_heads()) == 1, f"migrations branch: heads {script.get_heads()}"
    return [Path(rev.path).name for rev in reversed(newest_first)]


def misnamed(files_in_order: list[str]) -> list[str]:
    """Files whose name does not say their place: ``NNNN_`` counting from 0001 in the order
    they apply, so that a listing of the folder is that order."""
    found = []
    for place, name in enumerate(files_in_order, start=1):
        match = NUMBERED.match(name)
        if match is None or int(match.group(1)) != place:
            found.append(f"{name} applies as number {place}")
    if sorted(files_in_order) != files_in_order:
        found.append(f"sorted by name: {sorted(files_in_order)}")
    return found


def test_migration_files_sort_in_the_order_they_apply() -> None:
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    files = chain_files(script)
    on_disk = sorted(p.name for p in (MIGRATIONS / "versions").glob("*.py"))
    assert sorted(files) == on_disk, "every file in versions/ is one migration of the chain"
    assert misnamed(files) == [], "\n".join(misnamed(files))


def test_renaming_the_files_changed_no_revision_id() -> None:
    # Deployed databases hold revision ids in alembic_version: renaming files changed none.
    script = ScriptDirectory.from_config(alembic_config("sqlite://"))
    ids = [rev.revision for rev in reversed(list(script.walk_revisions()))]
    assert ids[:5] == [
        "0001",
        "v12_unknown_schema",
        "sec11_keys_per_actor",
        "actor_kinds",
        "interrupt_put_off_until",
    ]


def test_a_file_named_out_of_order_is_found() -> None:
    # Given the files as they were named before: a v12_ file applied second
    before = [
        "0001_initial_schema.py",
        "v12_unknown_schema_outcome.py",
        "0002_sec11_keys_per_actor.py",
    ]
    # Then each misplaced name is found; named by their order, none is
    assert misnamed(before) == [
        "v12_unknown_schema_outcome.py applies as number 2",
        "0002_sec11_keys_per_actor.py applies as number 3",
        "sorted by name: ['0001_initial_schema.py', '0002_sec11_keys_per_actor.py', "
        "'v12_unknown_schema_outcome.py']",
    ]
    assert misnamed(["0001_a.py", "0002_b.py", "0003_c.py"]) == []
