"""The run lifecycle: states, triggers and the transition table (pure, no I/O)."""

from statemachine.lifecycle import destination, sources, transition_table, triggers

__all__ = ["destination", "sources", "transition_table", "triggers"]
