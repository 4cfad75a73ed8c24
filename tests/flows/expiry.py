"""Flows for the expiry tests."""
