"""Every statement the engine sends has a unique name, and docs/reference/sql.md shows it."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

import pytest
from sqlalchemy.dialects.postgresql import psycopg

from models import sql_reference
from models.dialects import Dialect
from models.driver import DriverStatement, NotForDriver
from models.statements import DuplicateStatementError, Registry, Write

ROOT = Path(__file__).resolve().parents[2]
PSYCOPG = psycopg.dialect()  # type: ignore[no-untyped-call]


def _names_in_source() -> list[str]:
    """The names given to ``@named(...)`` anywhere in models/, read from the syntax trees."""
    found = []
    for path in sorted((ROOT / "models").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef):
                continue
            for decorator in node.decorator_list:
                if (
                    isinstance(decorator, ast.Call)
                    and isinstance(decorator.func, ast.Name)
                    and decorator.func.id == "named"
                    and isinstance(decorator.args[0], ast.Constant)
                ):
                    found.append(str(decorator.args[0].value))
    return found


def test_the_committed_reference_is_current() -> None:
    page = sql_reference.PAGE
    assert page.exists(), f"{page} is missing: run {sql_reference.REFRESH}"
    assert page.read_text() == sql_reference.render(), (
        f"{page.relative_to(ROOT)} is stale: run `.venv/bin/{sql_reference.REFRESH}` and commit it"
    )


def test_statement_names_are_unique_and_the_reference_loads_every_store() -> None:
    in_source = _names_in_source()
    assert len(in_source) > 30  # (the walk found the stores' statements)
    repeated = [name for name, n in Counter(in_source).items() if n > 1]
    assert repeated == [], f"statement names registered more than once: {repeated}"
    registered = {statement.name for statement in sql_reference.load_statements()}
    missing = sorted(set(in_source) - registered)
    assert missing == [], f"add their modules to models.sql_reference.STORES: {missing}"
    assert sorted(sql_reference.statements_of(sql_reference.render())) == sorted(registered)


def test_a_name_registered_twice_raises_at_once() -> None:
    registry = Registry()

    def first(_d: object) -> None:
        """One statement."""

    def second(_d: object) -> None:
        """Another statement."""

    registry.register("run.twice")(first)
    with pytest.raises(DuplicateStatementError, match=r"'run.twice' registered twice.*second"):
        registry.register("run.twice")(second)
    assert registry["run.twice"].build is first


@pytest.mark.parametrize("name", ["claim", "run.claim.now", "Run.claim", "run.", "run.cla-im"])
def test_a_name_that_is_not_family_dot_verb_is_refused(name: str) -> None:
    def build(_d: object) -> None:
        """A statement."""

    with pytest.raises(ValueError, match=r"is not 'family\.verb'"):
        Registry().register(name)(build)


def _as_named(sql: str) -> str:
    return re.sub(r"%\((\w+)\)s", r":\1", sql)


def test_the_driver_sends_the_text_the_reference_shows() -> None:
    # On PostgreSQL models.driver sends what it compiled itself; it must be the page's text.
    strategy, dialect = sql_reference.TARGETS[0][1], sql_reference.TARGETS[0][2]
    assert isinstance(strategy, Dialect) and strategy.name == "postgresql"
    compared = 0
    for statement in sql_reference.load_statements():
        for shape in statement.shapes:
            built = sql_reference.built(statement, strategy, shape)
            try:
                sent = DriverStatement(built, PSYCOPG).sql
            except NotForDriver:  # (a list given at execution: SQLAlchemy sends it)
                continue
            assert _as_named(sent).strip() == sql_reference.compiled(built, dialect)[0]
            compared += 1
    for _, main, writes, then, given in sql_reference.W1_COMPOSED:
        composed = strategy.compose(
            Write(sql_reference.STATEMENTS[main[0]], main[1]),
            [Write(sql_reference.STATEMENTS[n], s) for n, s in writes],
            None if then is None else Write(sql_reference.STATEMENTS[then[0]], then[1]),
            None if given is None else Write(sql_reference.STATEMENTS[given[0]], given[1]),
        )
        sent = DriverStatement(composed, PSYCOPG).sql
        assert _as_named(sent).strip() == sql_reference.compiled(composed, dialect)[0]
        compared += 1
    assert compared > 30
