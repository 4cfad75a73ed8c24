"""Sweeping expired interrupts (filled in by the expiry work)."""

from __future__ import annotations


def sweep_expired() -> int:
    """Apply the expiry policy of every due interrupt; returns how many were handled."""
    raise NotImplementedError("expiry sweeps are not built yet")
