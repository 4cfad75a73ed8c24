"""Flows and input schemas a test defines for itself, and modules it writes to define them.

``scratch_registry()`` gives them back when the test ends: the registries of ``worker.flows.flow``
and ``worker.flows.schemas`` are as they were before (the same dict objects, so that a test which
swapped one with monkeypatch restores it unharmed), and what was derived from the flows is
derived again. ``FlowFiles`` writes flow modules to a folder on ``sys.path`` under names no
other test uses, and forgets them at the end.
"""

from __future__ import annotations

import sys
import textwrap
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from worker.flows import flow as flows
from worker.flows import schemas


@contextmanager
def scratch_registry() -> Iterator[None]:
    """What is registered inside is forgotten after; what was registered before stays."""
    with flows._lock:
        saved_flows = dict(flows._flows)
        saved_loaded = set(flows._loaded)
        saved_unchecked = getattr(flows, "_unchecked", False)
    with schemas._lock:
        saved_schemas = dict(schemas._schemas)
        saved_ids = dict(schemas._ids)
        saved_origins = dict(getattr(schemas, "_origins", {}))
    try:
        yield
    finally:
        with flows._lock:
            flows._flows.clear()
            flows._flows.update(saved_flows)
            flows._loaded.clear()
            flows._loaded.update(saved_loaded)
            flows._unchecked = saved_unchecked
            # The runtime derives claimable steps per generation: it derives them again.
            flows._generation += 1
        with schemas._lock:
            for registry, saved in (
                (schemas._schemas, saved_schemas),
                (schemas._ids, saved_ids),
                (getattr(schemas, "_origins", {}), saved_origins),
            ):
                registry.clear()
                registry.update(saved)


class FlowFiles:
    """Flow modules written for one test, importable by the names ``write`` returns."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.names: list[str] = []

    def write(self, stem: str, source: str) -> str:
        """Write ``source`` as a new module; return its (unique) module name."""
        name = f"{stem}_{uuid.uuid4().hex[:8]}"
        self.path(name).write_text(textwrap.dedent(source), encoding="utf-8")
        self.names.append(name)
        return name

    def path(self, name: str) -> Path:
        return self.folder / f"{name}.py"

    def forget(self) -> None:
        for name in self.names:
            sys.modules.pop(name, None)


@pytest.fixture()
def flow_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[FlowFiles]:
    """A folder on ``sys.path`` for this test's flow modules, and a scratch registry."""
    monkeypatch.syspath_prepend(str(tmp_path))
    files = FlowFiles(tmp_path)
    with scratch_registry():
        try:
            yield files
        finally:
            files.forget()
