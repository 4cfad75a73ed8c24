"""Listings read their first page through an index, in order, however many interrupts there are
(issue 41: a million waiting runs). The planner is told not to sort where it can avoid it: a
plan that still sorts had no index to read the order from.

On SQLite only the listing of all interrupts is checked: with a bound status and no statistics,
SQLite's planner reads the pending ones through (status, deadline) and sorts them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from models.inbox_queries import answerable_interrupts
from tests.plans import explain
from worker import add_actor, enqueue_run, list_interrupts
from worker.testing import TaskRecorder, drain

# What the ``sent`` fixture (tests/integration/conftest.py) records: statements, with parameters.
Sent = list[tuple[str, Any]]


def _sorts(plan: str) -> bool:
    # PostgreSQL: a Sort node; SQLite: a temporary b-tree for the ORDER BY.
    return "Sort" in plan.replace("Sort Key", "") or "TEMP B-TREE FOR ORDER BY" in plan


def _read_of(sent: Sent, call: Callable[[], object], table: str) -> tuple[str, Any]:
    sent.clear()
    call()
    (found,) = [s for s in sent if s[0].lstrip().startswith("SELECT") and f"FROM {table}" in s[0]]
    return found


def test_the_interrupts_listing_and_the_inbox_read_their_first_page_in_index_order(
    tasks: TaskRecorder, sent: Sent, backend: str
) -> None:
    # Given interrupts waiting, pending and resolved alike
    add_actor("plan-reviewer", ["approver"])
    for n in range(3):
        enqueue_run("expiring", {"policy": "expire", "expires_in": 600, "n": n})
    drain()
    # When the operators' listing (all, and only the pending) and the inbox read a page
    reads = {
        "interrupts list": _read_of(sent, lambda: list_interrupts(limit=200), "interrupts"),
        "interrupts list --status pending": _read_of(
            sent, lambda: list_interrupts(status="pending", limit=200), "interrupts"
        ),
        "inbox": _read_of(sent, lambda: answerable_interrupts(["approver"]), "interrupts"),
    }
    # Then each reads them in order from an index: nothing sorts them
    if backend == "sqlite":
        reads = {"interrupts list": reads["interrupts list"]}
    plans = {name: explain(*read, sorting=False) for name, read in reads.items()}
    assert {name: plan for name, plan in plans.items() if _sorts(plan)} == {}
