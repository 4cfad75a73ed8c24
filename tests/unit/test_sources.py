"""Every source of the project compiles on each Python it supports (3.11 or newer).

Python 3.13's compiler cleans a docstring's indentation and encodes it again as UTF-8, so a
docstring holding a lone surrogate (``"\\ud800"`` written without a raw string) stops the
module from compiling there, while 3.11 and 3.12 compile it: ``models.storable`` did, and
with it every command and worker on 3.13.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Where the project keeps Python: everything but virtualenvs, builds and caches.
SKIPPED = frozenset({"site", "build", "node_modules"})
WITH_DOCSTRINGS = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)


def _sources() -> list[Path]:
    return sorted(
        path
        for path in ROOT.rglob("*.py")
        if not any(
            part.startswith(".") or part in SKIPPED or part.endswith(".egg-info")
            for part in path.relative_to(ROOT).parts[:-1]
        )
    )


def docstrings_not_utf8(source: str, where: str) -> list[str]:
    """Where a docstring of ``source`` holds what UTF-8 cannot encode (a lone surrogate)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, WITH_DOCSTRINGS):
            doc = ast.get_docstring(node, clean=False)
            if doc is None:
                continue
            try:
                doc.encode("utf-8")
            except UnicodeEncodeError:
                found.append(f"{where}:{getattr(node, 'lineno', 1)}")
    return found


def test_every_docstring_encodes_as_utf8() -> None:
    sources = _sources()
    assert len(sources) > 300  # (the walk found the project)
    found = [
        bad
        for path in sources
        for bad in docstrings_not_utf8(path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert found == [], f"docstrings with a lone surrogate (write it as \\\\ud800): {found}"


def test_the_check_sees_a_lone_surrogate_in_a_docstring() -> None:
    source = 'def f() -> None:\n    """JSON\'s ``"\\ud800"``."""\n\nvalue = "\\ud800"\n'
    assert docstrings_not_utf8(source, "sample.py") == ["sample.py:1"]
    escaped = source.replace('``"\\ud800"``', '``"\\\\ud800"``')
    assert docstrings_not_utf8(escaped, "sample.py") == []
