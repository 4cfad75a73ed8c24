"""What a signed-in actor may read: detail is scoped as listings are.

An interrupt (its evidence, scope, input) is readable by the roles it asks, and by the
operator and viewer roles of its run's flow (``Flow(operator_roles=..., viewer_roles=...)``);
a run (input, state, timeline) by those operator and viewer roles, and by the roles any of its
interrupts asks, so that a responder can follow what it answered. To anyone else such a record
does not exist: the refusal is the "not found" of an id nobody has, word for word, so it tells
nothing about what exists.
"""

from __future__ import annotations

from collections.abc import Iterable

from models import runs as run_store
from models.contracts import ActorView, InterruptView, RunView
from models.db import transaction
from models.errors import (
    FlowVersionError,
    InterruptNotFoundError,
    RunNotFoundError,
    UnknownFlowError,
)
from worker.flows.flow import get_flow
from worker.interrupts import get_interrupt, list_interrupts
from worker.runs import get_run


def flow_readers(flow_name: str, flow_version: int) -> frozenset[str]:
    """The roles that read every run of the flow: its operators and viewers (of the version
    the run is pinned to, else of the newest one here; none when the flow is not loaded here)."""
    try:
        flow = get_flow(flow_name, flow_version)
    except FlowVersionError:
        flow = get_flow(flow_name)
    except UnknownFlowError:
        return frozenset()
    return frozenset(flow.operator_roles) | frozenset(flow.viewer_roles)


def readable_interrupt(actor: ActorView, interrupt_id: str) -> InterruptView:
    """The interrupt, if ``actor`` may read it; else InterruptNotFoundError, as for a missing id."""
    interrupt = get_interrupt(interrupt_id)
    roles = set(actor.roles)
    if roles & set(interrupt.roles):
        return interrupt
    with transaction(readonly=True) as session:
        run = run_store.find_run(session, interrupt.run_id)
        flow = (run.flow_name, run.flow_version) if run is not None else None
    if flow is not None and roles & flow_readers(*flow):
        return interrupt
    raise InterruptNotFoundError(interrupt_id=interrupt_id)


def readable_run(actor: ActorView, run_id: str) -> tuple[RunView, list[InterruptView]]:
    """The run and its interrupts, if ``actor`` may read them; else RunNotFoundError, as for a
    missing id."""
    run = get_run(run_id)
    interrupts = list_interrupts(run_id=run.id)
    roles = set(actor.roles)
    if roles & flow_readers(run.flow_name, run.flow_version) or _asked(roles, interrupts):
        return run, interrupts
    raise RunNotFoundError(run_id=run_id)


def _asked(roles: set[str], interrupts: Iterable[InterruptView]) -> bool:
    return any(roles & set(interrupt.roles) for interrupt in interrupts)
