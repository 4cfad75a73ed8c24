"""Lifecycles of runs and interrupts: states, triggers and transition tables (pure, no I/O).

Nothing here imports the rest of interlude: ``models`` builds on it, never the other way.
"""

from statemachine.interrupts import (
    InterruptStatus,
    interrupt_destination,
    interrupt_sources,
    interrupt_table,
)
from statemachine.lifecycle import (
    CLAIMABLE,
    TERMINAL_STATES,
    RunState,
    destination,
    sources,
    transition_table,
    triggers,
)
from statemachine.table import TransitionNotAllowed

__all__ = [
    "CLAIMABLE",
    "TERMINAL_STATES",
    "InterruptStatus",
    "RunState",
    "TransitionNotAllowed",
    "destination",
    "interrupt_destination",
    "interrupt_sources",
    "interrupt_table",
    "sources",
    "transition_table",
    "triggers",
]
