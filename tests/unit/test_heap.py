"""A worker's and `interlude serve`'s start-up objects are frozen out of full garbage collections
(``worker.engine.heap``)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from celery.signals import worker_process_init, worker_ready
from celery.utils.dispatch.signal import Signal

import worker.engine.tasks  # noqa: F401  (connects the worker's signal handlers)
from worker.engine.heap import freeze_inherited_heap, freeze_startup_heap


class _Holder:
    """A container object the collector tracks."""


@pytest.fixture
def unfrozen() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()


def _tracked(obj: object) -> bool:
    # Frozen objects leave the generations that gc.get_objects() lists.
    return any(o is obj for o in gc.get_objects())


def test_freezing_takes_what_lives_now_out_of_collections_and_not_what_comes_after(
    unfrozen: None,
) -> None:
    before = _Holder()
    assert _tracked(before)
    frozen = freeze_startup_heap()
    after = _Holder()
    assert frozen > 0
    assert not _tracked(before)
    # What steps allocate later is still collected as before
    assert _tracked(after)


def test_start_up_garbage_is_collected_before_the_freeze(unfrozen: None) -> None:
    holder = _Holder()
    holder.self = holder  # type: ignore[attr-defined]
    watch = weakref.ref(holder)
    del holder
    freeze_startup_heap()
    # A cycle left by start-up is freed, not frozen for the life of the process
    assert watch() is None


def test_a_pool_child_freezes_what_it_inherited(unfrozen: None) -> None:
    inherited = _Holder()
    assert freeze_inherited_heap() > 0
    assert not _tracked(inherited)


def _receivers(signal: Signal) -> list[Callable[..., Any]]:
    found = []
    for _, receiver in signal.receivers:
        if isinstance(receiver, weakref.ReferenceType):
            receiver = receiver()
        found.append(receiver)
    return found


def test_the_worker_freezes_once_ready_and_in_each_pool_child() -> None:
    assert freeze_startup_heap in _receivers(worker_ready)
    assert freeze_inherited_heap in _receivers(worker_process_init)


def test_interlude_serve_freezes_its_start_up_objects_before_it_serves(unfrozen: None) -> None:
    from models.settings import get_settings
    from worker.cli.serve import app_to_serve

    before = _Holder()
    app = app_to_serve(get_settings())
    # FastAPI's, SQLAlchemy's and the routes' objects left start-up with the app: none of
    # them is walked by a full collection while the server answers
    assert not _tracked(before)
    assert not _tracked(app)
    assert _tracked(_Holder())
