"""On PostgreSQL the hot path's statements run on psycopg itself, compiled once (models.driver).

What a caller gets must be what SQLAlchemy's own execution gives: the same rows, values of the
same types (UTC datetimes, JSON as Python values), the same exceptions (IntegrityError for a
taken key; a dead connection invalidated, so the claim's retry gets a fresh one), and the
statement counts of ``before_cursor_execute`` listeners still see each statement.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from sqlalchemy import Integer, bindparam, event, insert, literal, select, text
from sqlalchemy import types as sa_types
from sqlalchemy.engine import make_url
from sqlalchemy.exc import DBAPIError, IntegrityError

from models import runs as store
from models.checkpoints import CHECKPOINTS
from models.db import dialect, get_engine, once_more_if_disconnected, transaction, utcnow
from models.driver import _CURSOR, DriverResult, DriverStatement, NotForDriver
from models.enums import RunState
from models.runs import RUNS
from models.statements import Registry, Statement
from tests.services import statements_sent
from worker import enqueue_run
from worker.testing import TaskRecorder


@pytest.fixture()
def pg(db: str, backend: str) -> str:
    if backend != "postgresql":
        pytest.skip("SQLite runs every statement through SQLAlchemy")
    return db


def _kill_pooled_connection(url: str) -> None:
    """End, from another connection, the backend of the connection the pool hands out next."""
    with transaction(readonly=True) as session:
        pid = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    plain = make_url(url).set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(plain, autocommit=True) as admin:
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _adhoc(name: str, statement: Any) -> Statement:
    """``statement`` as a named statement of this test's own (not one of the engine's)."""

    def build(_dialect: Any) -> Any:
        """A statement of the driver's tests."""
        return statement

    return Registry().register(f"test.{name}")(build)


def _both_ways(statement: Any, params: dict[str, Any]) -> tuple[list[Any], list[Any]]:
    with transaction(readonly=True) as session:
        driver = DriverStatement(statement, session.get_bind().dialect)
        ours = [tuple(row) for row in driver.execute(session, params).all()]
        theirs = [tuple(row) for row in session.execute(statement, params).all()]
    return ours, theirs


def test_rows_and_their_types_are_sqlalchemys(pg: str, tasks: TaskRecorder) -> None:
    # Given runs with JSON input, timestamps, floats, NULLs and a checkpoint each
    ids = [enqueue_run("three_steps", {"n": n, "nested": {"k": [n, None]}}) for n in range(3)]
    # When one statement with literals, a constant IN list and given parameters is run both ways
    statement = (
        select(*RUNS.c, *CHECKPOINTS.c, literal(7).label("seven"))
        .join(CHECKPOINTS, CHECKPOINTS.c.run_id == RUNS.c.id)
        .where(
            RUNS.c.state.in_([RunState.QUEUED.value, RunState.RUNNING.value]),
            RUNS.c.created_at <= bindparam("now", type_=RUNS.c.created_at.type),
            RUNS.c.id != bindparam("not_this"),
        )
        .order_by(RUNS.c.id)
    )
    ours, theirs = _both_ways(statement, {"now": utcnow(), "not_this": ids[0]})
    # Then the rows are equal, value for value and type for type
    assert len(ours) == 2
    assert ours == theirs
    for mine, its in zip(ours, theirs, strict=True):
        assert [type(v) for v in mine] == [type(v) for v in its]
        assert [getattr(v, "tzinfo", None) for v in mine] == [
            getattr(v, "tzinfo", None) for v in its
        ]
    created = ours[0][list(RUNS.c.keys()).index("created_at")]
    assert created.utcoffset().total_seconds() == 0  # aware, in UTC


def test_columns_are_attributes_of_the_rows(pg: str, tasks: TaskRecorder) -> None:
    run_id = enqueue_run("three_steps", {"n": 1})
    statement = select(RUNS.c.id, RUNS.c.state).where(RUNS.c.id == bindparam("rid"))
    with transaction(readonly=True) as session:
        row = (
            DriverStatement(statement, session.get_bind().dialect)
            .execute(session, {"rid": run_id})
            .first()
        )
    assert row is not None
    assert (row.id, row.state) == (run_id, RunState.QUEUED.value)
    with pytest.raises(AttributeError):
        row.missing  # noqa: B018


def test_a_missing_parameter_is_named(pg: str) -> None:
    statement = select(RUNS.c.id).where(RUNS.c.id == bindparam("rid"))
    with transaction(readonly=True) as session:
        driver = DriverStatement(statement, session.get_bind().dialect)
        with pytest.raises(KeyError, match="rid"):
            driver.execute(session, {})


def test_a_list_given_at_execution_runs_through_sqlalchemy(pg: str, tasks: TaskRecorder) -> None:
    ids = [enqueue_run("three_steps", {"n": n}) for n in range(3)]
    statement = select(RUNS.c.id).where(RUNS.c.id.in_(bindparam("ids", expanding=True)))
    with transaction(readonly=True) as session:
        with pytest.raises(NotForDriver, match="ids"):
            DriverStatement(statement, session.get_bind().dialect)
        found = dialect(session).run(session, _adhoc("ids_in", statement), (), {"ids": ids[:2]})
        assert sorted(found.scalars()) == sorted(ids[:2])


def test_a_taken_key_raises_integrity_error_and_writes_nothing(
    pg: str, tasks: TaskRecorder
) -> None:
    # Given a run with its checkpoint 0
    run_id = enqueue_run("three_steps", {"n": 1})
    duplicate = insert(CHECKPOINTS).values(
        id=bindparam("cid"),
        run_id=bindparam("rid"),
        seq=0,
        state={},
        budget_consumed=0.0,
        effects=[],
        epoch=0,
        created_at=bindparam("at", type_=CHECKPOINTS.c.created_at.type),
    )
    # When a driver statement inserts checkpoint 0 again, in a transaction with another write
    with pytest.raises(IntegrityError), transaction() as session:
        session.execute(text("UPDATE runs SET error = 'x' WHERE id = :rid"), {"rid": run_id})
        DriverStatement(duplicate, session.get_bind().dialect).execute(
            session, {"cid": "ck_dup", "rid": run_id, "at": utcnow()}
        )
    # Then the transaction rolled back: nothing of it is written
    with transaction(readonly=True) as session:
        assert store.load_run(session, run_id).error is None


def test_a_dead_connection_is_invalidated_and_the_claim_retry_reconnects(
    pg: str, tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("three_steps", {"n": 1})
    statement = select(RUNS.c.id).where(RUNS.c.id == bindparam("rid"))
    # Given the pooled connection's backend killed behind its back
    _kill_pooled_connection(pg)
    calls: list[int] = []

    def read() -> Any:
        calls.append(1)
        with transaction(readonly=True) as session:
            return dialect(session).run(session, _adhoc("dead", statement), (), {"rid": run_id})

    # When a driver statement is run on it, by work that is tried again on a dead connection
    with pytest.raises(DBAPIError) as failed:
        read()
    # Then SQLAlchemy's error says the connection was invalidated...
    assert failed.value.connection_invalidated
    # ...and the retry of once_more_if_disconnected gets a live one
    _kill_pooled_connection(pg)
    calls.clear()
    assert once_more_if_disconnected(read).first() == (run_id,)
    assert len(calls) == 2


def test_listeners_hear_every_driver_statement(pg: str, tasks: TaskRecorder) -> None:
    run_id = enqueue_run("three_steps", {"n": 1})
    statement = select(RUNS.c.id).where(RUNS.c.id == bindparam("rid"))
    with statements_sent(pg) as sent, transaction(readonly=True) as session:
        dialect(session).run(session, _adhoc("heard", statement), (), {"rid": run_id})
    assert sent == ["SELECT"]


def test_tracing_listeners_keep_their_state_on_the_context_between_before_and_after(
    pg: str, tasks: TaskRecorder
) -> None:
    # Given listeners as tracing instrumentation registers them: a span opened before the
    # statement and kept on its execution context, closed after it
    run_id = enqueue_run("three_steps", {"n": 1})
    statement = select(RUNS.c.id).where(RUNS.c.id == bindparam("rid"))
    closed: list[tuple[str, str]] = []

    def before(conn: object, cursor: object, sql: str, *rest: Any) -> None:
        rest[1].span = ("span", sql.split(None, 1)[0])

    def after(conn: object, cursor: object, sql: str, *rest: Any) -> None:
        closed.append(rest[1].span)

    engine = get_engine(pg)
    event.listen(engine, "before_cursor_execute", before)
    event.listen(engine, "after_cursor_execute", after)
    try:
        # When a driver statement runs
        with transaction(readonly=True) as session:
            found = dialect(session).run(session, _adhoc("traced", statement), (), {"rid": run_id})
    finally:
        event.remove(engine, "before_cursor_execute", before)
        event.remove(engine, "after_cursor_execute", after)
    # Then both were called, on one context of the driver's, and the statement still ran
    assert isinstance(found, DriverResult)
    assert closed == [("span", "SELECT")]


def test_a_given_value_overrides_a_bound_one_and_is_converted(pg: str) -> None:
    at = utcnow()
    statement = select(
        bindparam("n", value=5).label("n"),
        bindparam("at", value=at, type_=RUNS.c.created_at.type).label("at"),
    )
    later = at.replace(year=at.year + 1)
    with transaction(readonly=True) as session:
        driver = DriverStatement(statement, session.get_bind().dialect)
        assert tuple(driver.execute(session, {}).all()[0]) == (5, at)
        ours = tuple(driver.execute(session, {"n": 7, "at": later}).all()[0])
        theirs = tuple(session.execute(statement, {"n": 7, "at": later}).all()[0])
    assert ours == theirs == (7, later)


def test_an_interrupted_statement_leaves_its_connection_out_of_the_pool(
    pg: str, tasks: TaskRecorder
) -> None:
    # Given the backend of the connection the pool hands out next
    with transaction(readonly=True) as session:
        before = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    statement = select(RUNS.c.id).where(RUNS.c.id == bindparam("rid"))

    def interrupt(*_: object) -> None:
        raise KeyboardInterrupt

    # When a driver statement on it is interrupted (Ctrl-C, a process told to exit)...
    engine = get_engine(pg)
    event.listen(engine, "before_cursor_execute", interrupt)
    try:
        with pytest.raises(KeyboardInterrupt), transaction(readonly=True) as session:
            dialect(session).run(session, _adhoc("interrupted", statement), (), {"rid": "x"})
    finally:
        event.remove(engine, "before_cursor_execute", interrupt)
    # ...then that connection, in an unknown state, is not handed out again
    with transaction(readonly=True) as session:
        after = session.execute(text("SELECT pg_backend_pid()")).scalar_one()
    assert after != before


def test_a_connection_keeps_its_cursor_and_a_failed_statement_does_not_break_the_next(
    pg: str, tasks: TaskRecorder
) -> None:
    run_id = enqueue_run("three_steps", {"n": 1})
    with transaction(readonly=True) as session:  # (autocommit: a failure ends no transaction)
        dialect_ = session.get_bind().dialect
        read = DriverStatement(select(RUNS.c.id).where(RUNS.c.id == bindparam("rid")), dialect_)
        bad = DriverStatement(select(bindparam("v", type_=sa_types.Text).cast(Integer)), dialect_)
        # Given two statements on one connection: one cursor served both
        assert read.execute(session, {"rid": run_id}).all() == [(run_id,)]
        info = session.connection().connection.info
        kept = info[_CURSOR]
        assert read.execute(session, {"rid": run_id}).all() == [(run_id,)]
        assert info[_CURSOR] is kept
        # When a statement fails (SQLAlchemy closes its cursor)
        with pytest.raises(DBAPIError):
            bad.execute(session, {"v": "not a number"})
        # Then the next one on the same connection runs, on a new cursor
        assert read.execute(session, {"rid": run_id}).all() == [(run_id,)]
        assert info[_CURSOR] is not kept and not info[_CURSOR].closed
