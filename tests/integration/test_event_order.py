"""The events one write records get ids in the order they were given: a run's history reads in
the order things happened (``suspend`` before its ``interrupt``, a ``claim`` before its
``step_reexecuted``), on both databases, without the statement sorting them."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select

from models import runs as run_store
from models.db import transaction
from models.enums import EventKind
from models.tables import Event, Run
from worker import enqueue_run
from worker.testing import TaskRecorder

# Ten transitions a run can make one after another, then three facts: one write.
TRIGGERS = [
    "claim",
    "suspend",
    "accept_resume",
    "claim",
    "advance",
    "claim",
    "suspend",
    "accept_resume",
    "claim",
    "complete",
]
FACTS = [EventKind.STEP_REEXECUTED, EventKind.EFFECT_SKIPPED, EventKind.EFFECT_RECONCILED]


def test_the_events_of_one_write_are_recorded_in_order(db: str, tasks: TaskRecorder) -> None:
    # Given a queued run
    run_id = enqueue_run("three_steps", {"n": 1})
    # When one write moves it through ten transitions, with three facts besides
    with transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run_store.move_through(
            session,
            run,
            [(trigger, {"n": n}) for n, trigger in enumerate(TRIGGERS)],
            actor="test",
            facts=[(kind, {"n": 10 + n}) for n, kind in enumerate(FACTS)],
        )
    # Then the run's history holds them in that order
    with transaction(readonly=True) as session:
        rows: list[Any] = session.execute(
            select(Event.trigger, Event.detail).where(Event.run_id == run_id).order_by(Event.id)
        ).all()
    assert [(trigger, detail["n"]) for trigger, detail in rows[1:]] == [
        *((trigger, n) for n, trigger in enumerate(TRIGGERS)),
        *((kind.value, 10 + n) for n, kind in enumerate(FACTS)),
    ]
