"""Where a definition comes from: the file whose code registers a flow, a schema or a tool.

One (flow, version), one schema id and one tool are defined by one file: a second file
defining the same is refused rather than silently replacing the first.
"""

from __future__ import annotations

import inspect
import os

# The modules whose frames are registration machinery, not the code that defines something.
MACHINERY = frozenset({"worker.flows.flow", "worker.flows.schemas", "worker.flows.toolcalls"})


def defining_file(skip: frozenset[str] = MACHINERY) -> str:
    """The file whose code is defining something now: the module being executed (imported or
    run) nearest on the stack; else the nearest caller outside ``skip``'s modules.

    The module, not the direct caller: a flow built by a shared helper belongs to the module
    that calls the helper. The same file run as ``__main__`` and imported by name is one file.
    """
    frame = inspect.currentframe()
    caller: str | None = None
    try:
        while frame is not None:
            # (A module of ``skip`` may define things in its own body: the built-in schemas.)
            if frame.f_code.co_name == "<module>":
                return _real(frame.f_code.co_filename)
            if caller is None and frame.f_globals.get("__name__") not in skip:
                caller = frame.f_code.co_filename
            frame = frame.f_back
    finally:
        del frame
    return _real(caller) if caller is not None else "?"


def _real(filename: str) -> str:
    # "<string>", "<stdin>": no file to resolve.
    return filename if filename.startswith("<") else os.path.realpath(filename)
