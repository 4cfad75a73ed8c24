"""interlude installs top-level names next to ``worker``; a file of the same name in the
project wins.

A ``models.py`` (or ``statemachine.py``, ``beat_schedule.py``) in the folder ``celery -A
worker`` or ``python -c "import worker"`` runs in comes first on ``sys.path`` and hides
interlude's own, which otherwise fails later as "'models' is not a package" (or as beat
running someone else's schedule). Checked once, at import.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

from worker.startup import refuse

# What ``worker`` imports, installed next to it: each name and the file it must come from.
SIBLINGS = {
    "models": "models/__init__.py",
    "statemachine": "statemachine/__init__.py",
    "beat_schedule": "beat_schedule.py",
}


class ShadowedPackageError(ImportError):
    """A file or folder of the project hides one of interlude's packages."""


def check_layout() -> None:
    """Raise ShadowedPackageError naming the file that hides a package, and what to do."""
    home = Path(__file__).resolve().parent.parent
    for name, installed in SIBLINGS.items():
        expected = home / installed
        found = _origin(name)
        if found is not None and found != expected:
            where = expected.parent if expected.name == "__init__.py" else expected
            kind = "package" if expected.name == "__init__.py" else "module"
            refuse(
                ShadowedPackageError(
                    f"{found} shadows interlude's {kind} {name!r} ({where}): rename "
                    f"that {'file' if found.name != '__init__.py' else 'folder'} or run from "
                    "another directory",
                    name=name,
                    path=str(found),
                )
            )


def _origin(name: str) -> Path | None:
    module = sys.modules.get(name)
    if module is not None:
        origin = getattr(module, "__file__", None)
    else:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
    return Path(origin).resolve() if origin else None
