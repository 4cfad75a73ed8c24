"""The inbox matches roles and separation of duties in the database: a page is one query whose
rows are the page, read from the role's own rows (``pending_interrupt_roles``, kept by
triggers), however many interrupts of other roles wait before it (issue 41: a million waiting
runs, of which one team's backlog must not slow another team's inbox)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from sqlalchemy import delete, select, update

from models.contracts import InterruptView
from models.db import get_engine, transaction, utcnow
from models.inbox_queries import answerable_interrupts
from models.tables import Interrupt, PendingInterruptRole
from tests.plans import explain
from tests.resumes import approval_waiting_on_alice, contract_for, drain_pending
from worker import (
    add_actor,
    cancel_run,
    enqueue_run,
    get_interrupt,
    list_interrupts,
    submit_resume,
)
from worker.engine.sweeps import sweep_report
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


def test_a_role_s_page_is_read_from_its_own_rows_not_walked_to(
    tasks: TaskRecorder, sent: Sent
) -> None:
    # Given many pending interrupts of one role, older than one of another role, and the
    # tables analyzed (as autovacuum keeps them)
    _waiting("multi_gate", 40)
    (mine,) = _waiting("approval", 1)
    with get_engine().connect() as conn:
        conn.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    # When an actor holding the young role, and one holding a role with nothing pending, read
    # their inboxes
    sent.clear()
    assert [i.run_id for i in answerable_interrupts(["approver"]).items] == [mine]
    assert answerable_interrupts(["auditor"]).items == []
    # Then each page is a range of the role's own rows: no pending interrupt is walked to it,
    # even where the planner would rather read a small table whole
    for statement, params in _reads_of_interrupts(sent):
        plan = explain(statement, params)
        assert "pending_interrupt_roles" in plan and "ix_interrupts_pending" not in plan, plan


def _kept(interrupt_id: str) -> list[str]:
    """The roles ``pending_interrupt_roles`` holds for ``interrupt_id``."""
    role = PendingInterruptRole
    with transaction(readonly=True) as session:
        query = select(role.role).where(role.interrupt_id == interrupt_id).order_by(role.role)
        return list(session.execute(query).scalars())


def test_a_pending_interrupt_has_a_row_per_role_until_it_is_no_longer_pending(
    tasks: TaskRecorder,
) -> None:
    # Given interrupts raised for approvers, one of which escalates to managers when due
    answered = approval_waiting_on_alice()
    ops = add_actor("ops", ["operator"])
    _, escalated = _waiting_on("expiring", policy="escalate", expires_in=60)
    _, expiring = _waiting_on("expiring", policy="expire", expires_in=60)
    cancelled_run, cancelled = _waiting_on("approval")
    _, deleted = _waiting_on("approval")
    _, moved = _waiting_on("approval")
    for interrupt in (answered.interrupt, escalated, expiring, cancelled, deleted, moved):
        assert _kept(interrupt.id) == ["approver"]
    # When one is answered, one escalates and one expires at the sweep, one's run is
    # cancelled, one is deleted and one's roles are changed where it is
    result = submit_resume(contract_for(answered.interrupt, "alice"), answered.credential)
    assert result.accepted, result.reason
    sweep_report(now=utcnow() + timedelta(minutes=5))
    cancel_run(cancelled_run, actor="ops", credential=ops)
    with transaction() as session:
        session.execute(delete(Interrupt).where(Interrupt.id == deleted.id))
        moved_to = ["legal", "approver", "legal"]
        session.execute(update(Interrupt).where(Interrupt.id == moved.id).values(roles=moved_to))
    drain()
    # Then those no longer pending have no rows left, the one whose roles changed has a row
    # for each of its new roles, and the escalation (a new interrupt) one for managers
    for interrupt in (answered.interrupt, escalated, expiring, cancelled, deleted):
        assert _kept(interrupt.id) == [], interrupt
    assert _kept(moved.id) == ["approver", "legal"]
    escalation = get_interrupt(escalated.id).superseded_by
    assert escalation is not None and _kept(escalation) == ["manager"]
    # And the inbox follows
    assert [i.id for i in answerable_interrupts(["manager"]).items] == [escalation]
    assert [i.id for i in answerable_interrupts(["legal", "approver"]).items] == [moved.id]


def _waiting_on(flow: str, **run_input: Any) -> tuple[str, InterruptView]:
    run_id = enqueue_run(flow, run_input)
    return run_id, drain_pending(run_id)
