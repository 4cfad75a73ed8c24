"""Turning a ``transitions`` declaration into a lookup table, once per process."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any


class TransitionNotAllowed(ValueError):
    """A trigger that the lifecycle does not allow from the current state."""

    def __init__(self, trigger: str, current: str) -> None:
        super().__init__(f"cannot {trigger} from {current}")
        self.trigger = trigger
        self.current = current


class _Model:
    """The model a machine is built around; it never holds a real row."""

    state: str


def build_table(
    states: list[str], transitions: list[dict[str, Any]], initial: str
) -> MappingProxyType[tuple[str, str], str]:
    """``(trigger, source) -> dest`` as the transitions library resolves the declaration.

    A ``Machine`` per row costs ~0.3 ms; asking one machine for its table once makes every
    later decision a dictionary lookup.
    """
    # Imported here: the states alone (the CLI's --help, listings) do not need the library.
    from transitions import Machine

    machine = Machine(
        model=_Model(),
        states=states,
        transitions=transitions,
        initial=initial,
        auto_transitions=False,
    )
    table: dict[tuple[str, str], str] = {}
    for trigger, event in machine.events.items():
        for source, moves in event.transitions.items():
            for move in moves:
                table[(trigger, source)] = str(move.dest)
    return MappingProxyType(table)
