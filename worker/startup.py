"""Failing at start-up in one line when the process is the ``celery`` command.

Application code that imports ``worker`` gets an exception it can catch; ``celery -A worker``
would wrap it in a traceback, so there the message is printed alone and the process exits 1.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import NoReturn


def project_on_path() -> None:
    """The folder the process was started in, on ``sys.path``: INTERLUDE_FLOWS names modules of
    the project there. ``celery -A worker`` puts it first only while it imports the app, and
    the flows are imported later; appended, so that a models.py there cannot hide interlude's
    own package of that name."""
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.append(cwd)


def under_celery_command() -> bool:
    program = Path(sys.argv[0]) if sys.argv and sys.argv[0] else Path()
    return program.name == "celery" or program.parent.name == "celery"


def refuse(exc: Exception) -> NoReturn:
    """Raise ``exc``; under the ``celery`` command, exit 1 with its message on one line."""
    if under_celery_command():
        raise SystemExit(f"interlude: error: {' '.join(str(exc).split())}") from None
    raise exc
