"""How a step's task ends for Celery (and so for Flower): checked without a broker."""

from __future__ import annotations

import pickle

import pytest
from celery.exceptions import Retry

from models.errors import StepFailedError
from worker.app import app
from worker.engine.commits import Failure
from worker.engine.tasknames import TASK_RESUME, TASK_STEP
from worker.engine.tasks import MAX_TASK_ERROR, report


def _failure(*, retry_in: float | None, error: str = "RuntimeError: flaky failure 1") -> Failure:
    return Failure("run-1", "procurement", "certify", 2, error, "RuntimeError", retry_in)


def test_a_step_that_did_not_fail_ends_the_task_normally() -> None:
    assert report(None) is None


def test_a_failure_to_be_retried_ends_the_task_as_retry_without_publishing_it() -> None:
    # When the committed failure will be retried (interlude has already published the retry)
    with pytest.raises(Retry) as raised:
        report(_failure(retry_in=0.4))
    # Then the task raises Celery's Retry predicate (not Task.retry, which would publish a
    # second copy), carrying the committed error and when interlude will try again
    retry = raised.value
    assert retry.sig is None
    assert retry.when == 0.4
    assert isinstance(retry.exc, StepFailedError)
    assert str(retry.exc) == (
        "run run-1: step procurement:certify failed (attempt 2): RuntimeError: flaky failure 1"
    )


def test_a_failure_for_good_ends_the_task_as_failure_with_the_committed_error() -> None:
    with pytest.raises(StepFailedError) as raised:
        report(_failure(retry_in=None))
    exc = raised.value
    assert str(exc) == (
        "run run-1: step procurement:certify failed (attempt 2): RuntimeError: flaky failure 1"
    )
    assert (exc.run_id, exc.flow, exc.step, exc.attempt) == ("run-1", "procurement", "certify", 2)
    # Raised outside any handler: no chained exception (nor its frames' locals) goes with it
    assert exc.__context__ is None and exc.__cause__ is None
    # A prefork pool sends it from the child to the worker by pickle
    again = pickle.loads(pickle.dumps(exc))
    assert (type(again), str(again), again.step) == (StepFailedError, str(exc), "certify")


def test_the_error_a_task_carries_is_bounded_and_on_one_line() -> None:
    with pytest.raises(StepFailedError) as raised:
        report(_failure(retry_in=None, error="ValueError: " + "x\n" * 5000))
    text = str(raised.value)
    assert "\n" not in text
    assert len(text) < MAX_TASK_ERROR + 100
    assert text.endswith("…")


def test_step_tasks_declare_their_failure_as_expected() -> None:
    # Celery logs an expected error on one INFO line, without a traceback
    for name in (TASK_STEP, TASK_RESUME):
        assert app.tasks[name].throws == (StepFailedError,)
