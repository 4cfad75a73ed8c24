"""Keeping a worker's start-up objects out of Python's full garbage collections (and those
of ``interlude serve``, whose process answers over HTTP: ``worker.cli.serve.app_to_serve``).

A worker process starts with well over 100,000 objects that live as long as it does (Celery,
kombu, SQLAlchemy, the flows, the compiled statements). Python's oldest generation holds them,
and each full collection walks all of them while holding the GIL: on a ``-P threads -c 50``
worker one such pass took 123 ms in the middle of a run of two-step runs (W4), during which
none of the fifty steps could commit or start, and the steps came out of it in one wave.
``gc.freeze()`` moves every object alive now into a permanent generation that collections
skip: what a step allocates is still collected as before, but a full collection then walks
only what was allocated since. It also keeps the collector from writing to the pages a pool
child shares with its parent after a fork.

Frozen objects are never collected; so the heap is frozen once start-up is over, after one
full collection has freed what start-up left as garbage.
"""

from __future__ import annotations

import gc
from typing import Any


def freeze_startup_heap(**_: Any) -> int:
    """Collect start-up's garbage, then freeze what is left (a Celery signal handler).

    Returns how many objects the permanent generation now holds.
    """
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()


def freeze_inherited_heap(**_: Any) -> int:
    """Freeze, in a pool child just forked, what it set up since the fork (no collection: its
    parent collected before forking, and what it inherited is frozen already)."""
    gc.freeze()
    return gc.get_freeze_count()
