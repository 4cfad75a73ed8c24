"""Flows for the interrupts tests."""
