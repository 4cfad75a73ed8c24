"""The inbox matches roles and separation of duties in the database: a page is one query whose
rows are the page, however many older interrupts of other roles wait before it (issue 41: a
million waiting runs, of which one team's backlog must not slow another team's inbox)."""

from __future__ import annotations

from typing import Any

import pytest

from models.db import get_engine
from models.inbox_queries import answerable_interrupts
from worker import add_actor, enqueue_run, list_interrupts
from worker.testing import TaskRecorder, drain

pytestmark = pytest.mark.usefixtures("scratch")

# What the ``sent`` fixture (tests/integration/conftest.py) records: statements, with parameters.
Sent = list[tuple[str, Any]]


def _waiting(flow: str, count: int, **kwargs: Any) -> list[str]:
    runs = [enqueue_run(flow, {"n": n}, **kwargs) for n in range(count)]
    drain()
    return runs


def _reads_of_interrupts(sent: Sent) -> list[tuple[str, Any]]:
    return [s for s in sent if s[0].lstrip().startswith("SELECT") and "FROM interrupts" in s[0]]


def test_a_backlog_of_other_roles_is_passed_over_by_the_server(
    tasks: TaskRecorder, sent: Sent
) -> None:
    # Given twelve interrupts for legal, older than three for approvers
    _waiting("multi_gate", 12)
    mine = _waiting("approval", 3)
    # When an approver reads the first page of two
    sent.clear()
    page = answerable_interrupts(["approver"], limit=2)
    # Then it holds the two oldest approvals, and a cursor to the rest
    assert [i.run_id for i in page.items] == mine[:2]
    assert page.next_cursor is not None
    # And it was one query, whose rows are the page: the legal ones never left the database
    ((statement, params),) = _reads_of_interrupts(sent)
    with get_engine().connect() as conn:
        assert len(conn.exec_driver_sql(statement, params).all()) == 2
    # And the next page holds the last approval, and no cursor
    rest = answerable_interrupts(["approver"], limit=2, cursor=page.next_cursor)
    assert [i.run_id for i in rest.items] == mine[2:] and rest.next_cursor is None


def test_any_of_the_actors_roles_matches_in_the_order_they_were_asked(
    tasks: TaskRecorder,
) -> None:
    # Given legal, approver and legal interrupts, in that order
    first = _waiting("multi_gate", 1)
    second = _waiting("approval", 1)
    third = _waiting("multi_gate", 1)
    # Then an actor holding both roles (and one nobody asked) sees all three, oldest first
    both = answerable_interrupts(["nobody", "approver", "legal"])
    assert [i.run_id for i in both.items] == first + second + third
    # And each role alone sees its own; no role sees nothing
    assert [i.run_id for i in answerable_interrupts(["legal"]).items] == first + third
    assert [i.run_id for i in answerable_interrupts(["approver"]).items] == second
    assert answerable_interrupts(["nobody"]).items == []
    assert answerable_interrupts([]).items == []


def test_the_starter_of_a_run_does_not_see_an_interrupt_kept_from_them(
    tasks: TaskRecorder,
) -> None:
    # Given interrupts that keep the starter out, of runs alice, bob and nobody started
    add_actor("alice", ["approver"])
    (alices,) = _waiting("guarded", 1, started_by="alice")
    (bobs,) = _waiting("guarded", 1, started_by="bob")
    (nobodys,) = _waiting("guarded", 1)
    # And an approval that does not, of a run alice started
    (plain,) = _waiting("approval", 1, started_by="alice")
    # Then alice's inbox leaves out only her own guarded run
    seen = [i.run_id for i in answerable_interrupts(["approver"], actor_id="alice").items]
    assert seen == [bobs, nobodys, plain]
    # And without an actor (an operator's listing by role) every one is there
    every = [i.run_id for i in answerable_interrupts(["approver"]).items]
    assert every == [alices, bobs, nobodys, plain]
    assert {i.run_id for i in list_interrupts(status="pending")} == set(every)


def test_on_postgresql_a_role_with_nothing_pending_is_looked_up_not_walked_to(
    tasks: TaskRecorder, sent: Sent, backend: str
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite has no GIN index: its inbox walks the pending interrupts in order")
    # Given many pending interrupts, none for the role asked about, and the table analyzed
    # (as autovacuum keeps it)
    _waiting("approval", 40)
    with get_engine().connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE interrupts")
    # When an actor holding only that role reads the inbox
    sent.clear()
    assert answerable_interrupts(["auditor"]).items == []
    # Then the planner reads the role's pending interrupts from the roles index, rather than
    # walking every pending interrupt in order
    ((statement, params),) = _reads_of_interrupts(sent)
    with get_engine().connect() as conn:
        conn.exec_driver_sql("SET enable_seqscan = off")
        plan = "\n".join(r[0] for r in conn.exec_driver_sql(f"EXPLAIN {statement}", params))
        conn.rollback()
    assert "ix_interrupts_pending_roles" in plan, plan
