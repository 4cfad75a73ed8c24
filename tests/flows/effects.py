"""Flows for the effects tests."""
