"""The run lifecycle, declared once for the ``transitions`` library.

The machine is built once per process and asked once for its transition table; every later
decision is a dictionary lookup. The SQL compare-and-set in ``models.runs`` is what actually
guards a row; this module only says which moves exist.
"""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from statemachine.table import TransitionNotAllowed, build_table


class RunState(StrEnum):
    QUEUED = "queued"
    RUNNING = "running"
    WAITING = "waiting"
    RESUMING = "resuming"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    EXPIRED = "expired"
    CANCELLED = "cancelled"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset(
    {RunState.SUCCEEDED, RunState.FAILED, RunState.EXPIRED, RunState.CANCELLED}
)
# The states a worker may claim a run from.
CLAIMABLE = (RunState.QUEUED.value, RunState.RESUMING.value)

Q, R, W, RS = RunState.QUEUED, RunState.RUNNING, RunState.WAITING, RunState.RESUMING
NON_TERMINAL = [s.value for s in RunState if s not in TERMINAL_STATES]

TRANSITIONS: list[dict[str, Any]] = [
    {"trigger": "claim", "source": [Q.value, RS.value], "dest": R.value},
    {"trigger": "advance", "source": R.value, "dest": Q.value},
    {"trigger": "retry", "source": R.value, "dest": Q.value},
    {"trigger": "requeue", "source": R.value, "dest": Q.value},
    {"trigger": "suspend", "source": R.value, "dest": W.value},
    {"trigger": "accept_resume", "source": W.value, "dest": RS.value},
    {"trigger": "expire", "source": W.value, "dest": RunState.EXPIRED.value},
    {"trigger": "complete", "source": R.value, "dest": RunState.SUCCEEDED.value},
    {"trigger": "fail", "source": [R.value, Q.value, RS.value], "dest": RunState.FAILED.value},
    {"trigger": "cancel", "source": NON_TERMINAL, "dest": RunState.CANCELLED.value},
    # An operator's retry of a failed run: it continues from its last checkpoint.
    {"trigger": "restart", "source": RunState.FAILED.value, "dest": Q.value},
]


@lru_cache(maxsize=1)
def transition_table() -> MappingProxyType[tuple[str, str], str]:
    """``(trigger, source) -> dest`` as the transitions library resolves it."""
    return build_table([s.value for s in RunState], TRANSITIONS, Q.value)


def triggers() -> frozenset[str]:
    return frozenset(trigger for trigger, _ in transition_table())


def destination(trigger: str, current: str) -> RunState:
    """The state ``trigger`` moves a run in ``current`` to, or TransitionNotAllowed."""
    dest = transition_table().get((trigger, current))
    if dest is None:
        raise TransitionNotAllowed(trigger, current)
    return RunState(dest)


def sources(trigger: str) -> frozenset[RunState]:
    """Every state that ``trigger`` may leave (what a CAS may expect to find)."""
    return frozenset(RunState(src) for trig, src in transition_table() if trig == trigger)
