"""``worker`` is the one public face: every name it exports resolves, and every import and
dotted name the README, the docs and the examples show works as written."""

from __future__ import annotations

import importlib
import re
from pathlib import Path
from typing import Any

import pytest

import worker

ROOT = Path(__file__).resolve().parents[2]
# ``from worker.testing import TaskRecorder, recording`` (one line; code blocks and examples).
IMPORT = re.compile(r"^\s*from (worker(?:\.\w+)*) import ([\w, ]+?)\s*(?:#.*)?$", re.MULTILINE)
# A dotted name in backticks: ``worker.operate.retry_run(...)``.
DOTTED = re.compile(r"`(worker(?:\.\w+)+)")


def _shown_texts() -> list[Path]:
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *(ROOT / "examples").glob("*.py"),
    ]


def resolve(dotted: str) -> Any:
    """The object a dotted name stands for: its longest importable module, then attributes."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found: Any = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attribute in parts[cut:]:
            found = getattr(found, attribute)
        return found
    raise ModuleNotFoundError(dotted)


def shown_imports(text: str) -> list[tuple[str, str]]:
    return [
        (module, name.strip())
        for module, names in IMPORT.findall(text)
        for name in names.split(",")
        if name.strip()
    ]


def test_every_exported_name_resolves() -> None:
    for name in worker.__all__:
        assert getattr(worker, name) is not None, name
    assert set(worker.__all__) <= set(dir(worker))


def broken(text: str, *, markdown: bool) -> list[str]:
    """The imports (and, in a page, the dotted names in backticks) of ``text`` that fail."""
    found = []
    for module, name in shown_imports(text):
        try:
            getattr(importlib.import_module(module), name)
        except (ImportError, AttributeError) as exc:
            found.append(f"from {module} import {name}: {exc}")
    if markdown:
        for dotted in DOTTED.findall(text):
            try:
                resolve(dotted)
            except (ImportError, AttributeError) as exc:
                found.append(f"{dotted}: {exc}")
    return found


@pytest.mark.parametrize("path", _shown_texts(), ids=lambda p: str(p.relative_to(ROOT)))
def test_what_the_docs_show_imports_works(path: Path) -> None:
    found = broken(path.read_text(), markdown=path.suffix == ".md")
    assert found == [], f"{path.name} shows what does not import:\n" + "\n".join(found)


def test_an_import_or_a_name_that_does_not_resolve_is_found() -> None:
    # Given a page that shows a module that is not there, a name a module lacks, and the face
    text = (
        "```python\nfrom worker.nowhere import collect_stats\n"
        "    from worker import Flow  # the face\nfrom worker.operate import no_such\n```\n"
        "Call `worker.operate.retry_run(...)`, or `worker.ops.stats.no_such()`.\n"
    )
    # Then the three that fail are found, and only those
    found = broken(text, markdown=True)
    assert [line.split(":")[0] for line in found] == [
        "from worker.nowhere import collect_stats",
        "from worker.operate import no_such",
        "worker.ops.stats.no_such",
    ]
    assert resolve("worker.ops.stats.collect_stats") is worker.collect_stats
