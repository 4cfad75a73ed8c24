"""The interrupt lifecycle: a pending interrupt ends exactly once, one of four ways."""

from __future__ import annotations

from enum import StrEnum
from functools import lru_cache
from types import MappingProxyType
from typing import Any

from statemachine.table import TransitionNotAllowed, build_table


class InterruptStatus(StrEnum):
    PENDING = "pending"
    RESOLVED = "resolved"
    EXPIRED = "expired"
    SUPERSEDED = "superseded"
    CANCELLED = "cancelled"


P = InterruptStatus.PENDING.value

INTERRUPT_TRANSITIONS: list[dict[str, Any]] = [
    # An accepted resume answers it.
    {"trigger": "resolve", "source": P, "dest": InterruptStatus.RESOLVED.value},
    # Its deadline passed and its policy ended the wait (or the run no longer waited on it).
    {"trigger": "expire", "source": P, "dest": InterruptStatus.EXPIRED.value},
    # A newer interrupt asks in its place: an escalation or a renewed review.
    {"trigger": "supersede", "source": P, "dest": InterruptStatus.SUPERSEDED.value},
    # Its run was cancelled.
    {"trigger": "cancel", "source": P, "dest": InterruptStatus.CANCELLED.value},
]


@lru_cache(maxsize=1)
def interrupt_table() -> MappingProxyType[tuple[str, str], str]:
    return build_table([s.value for s in InterruptStatus], INTERRUPT_TRANSITIONS, P)


def interrupt_destination(trigger: str, current: str) -> InterruptStatus:
    """The status ``trigger`` moves an interrupt in ``current`` to, or TransitionNotAllowed."""
    dest = interrupt_table().get((trigger, current))
    if dest is None:
        raise TransitionNotAllowed(trigger, current)
    return InterruptStatus(dest)


def interrupt_sources(trigger: str) -> frozenset[InterruptStatus]:
    return frozenset(InterruptStatus(s) for t, s in interrupt_table() if t == trigger)
