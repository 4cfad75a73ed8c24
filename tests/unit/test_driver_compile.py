"""models.driver compiles a statement once into psycopg's form, with no database at hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from sqlalchemy import bindparam, literal, literal_column, select
from sqlalchemy.dialects.postgresql import psycopg

from models.driver import DriverStatement, NotForDriver, positional
from models.runs import RUNS

DIALECT = psycopg.dialect()  # type: ignore[no-untyped-call]


def test_literals_and_constant_in_lists_are_bound_once_and_given_values_named() -> None:
    statement = select(RUNS.c.id, literal(3).label("three")).where(
        RUNS.c.state.in_(["queued", "resuming"]), RUNS.c.id == bindparam("rid")
    )

    driver = DriverStatement(statement, DIALECT)

    assert "POSTCOMPILE" not in driver.sql
    assert sorted(driver.fixed.values(), key=str) == [3, "queued", "resuming"]
    params = driver.parameters({"rid": "r1"})
    assert params["rid"] == "r1"
    assert all(f"%({name})s" in driver.sql for name in params)


def test_a_given_value_is_converted_as_its_column_type_says() -> None:
    # Timestamps are UTC on every backend: an aware value in another zone is converted...
    statement = select(RUNS.c.id).where(
        RUNS.c.created_at < bindparam("at", type_=RUNS.c.created_at.type)
    )
    driver = DriverStatement(statement, DIALECT)
    east = timezone(timedelta(hours=2))

    at = driver.parameters({"at": datetime(2026, 1, 1, 12, tzinfo=east)})["at"]

    assert at == datetime(2026, 1, 1, 10, tzinfo=UTC)
    assert at.tzinfo is UTC
    # ...and a naive one is refused, as on SQLAlchemy's own path
    with pytest.raises(ValueError, match="naive"):
        driver.parameters({"at": datetime(2026, 1, 1, 12)})


def test_a_missing_value_is_named() -> None:
    driver = DriverStatement(select(RUNS.c.id).where(RUNS.c.id == bindparam("rid")), DIALECT)

    with pytest.raises(KeyError, match="rid"):
        driver.parameters({})


def test_a_list_given_at_execution_is_left_to_sqlalchemy() -> None:
    statement = select(RUNS.c.id).where(RUNS.c.id.in_(bindparam("ids", expanding=True)))

    with pytest.raises(NotForDriver, match="ids"):
        DriverStatement(statement, DIALECT)


def test_the_named_form_becomes_numbered_parameters_once() -> None:
    # Given psycopg's named form with a name used twice and a literal percent, When made
    # positional, Then each name gets one number in order of first use and %% becomes %.
    raw, order = positional("SELECT %(a)s, %(b)s WHERE x LIKE 'a%%' AND y = %(a)s")
    assert raw == "SELECT $1, $2 WHERE x LIKE 'a%' AND y = $1"
    assert order == ("a", "b")


def test_a_dollar_in_the_text_leaves_the_statement_to_sqlalchemy() -> None:
    statement = select(RUNS.c.id).where(RUNS.c.flow_name == literal_column("'$1'"))
    with pytest.raises(NotForDriver, match=r"\$"):
        DriverStatement(statement, DIALECT)
