"""How a notify task ends for Celery (and so for Flower), and when its retries are due: checked
without a broker."""

from __future__ import annotations

import pickle

import pytest
from celery.exceptions import Retry

from models.errors import NotifierFailedError
from models.settings import LONGEST_NOTIFY_BACKOFF
from worker.engine.dispatch import Notice
from worker.engine.tasks import report_delivery
from worker.ops.notifications import Delivery, Outcome, backoff

NOTICE = Notice("int-1", "run-1", "deploy_gate", 2, "post_inbox_link", attempt=3)


def test_retries_wait_twice_as_long_each_time_up_to_a_bound() -> None:
    assert [backoff(attempt, 2.0) for attempt in range(1, 6)] == [2.0, 4.0, 8.0, 16.0, 32.0]
    assert backoff(1, 0.0) == 0.0
    # Never as long as Redis's visibility timeout, past which a countdown loops
    assert backoff(30, 2.0) == LONGEST_NOTIFY_BACKOFF == 600.0


@pytest.mark.parametrize("outcome", [Outcome.NOTIFIED, Outcome.SKIPPED])
def test_a_notifier_called_or_not_needed_ends_the_task_normally(outcome: Outcome) -> None:
    assert report_delivery(NOTICE, Delivery(outcome)) is None


def test_a_failure_to_be_retried_ends_the_task_as_retry_without_publishing_it() -> None:
    # When interlude has published the next attempt itself
    delivery = Delivery(Outcome.RETRYING, error="ConnectionError: refused", retry_in=8.0)
    with pytest.raises(Retry) as raised:
        report_delivery(NOTICE, delivery)
    # Then the task raises Celery's Retry predicate (Task.retry would publish a second copy)
    assert raised.value.sig is None
    assert raised.value.when == 8.0
    assert str(raised.value.exc) == (
        "notifier post_inbox_link failed for interrupt int-1 (attempt 3): ConnectionError: refused"
    )


def test_a_failure_for_good_ends_the_task_as_failure() -> None:
    delivery = Delivery(Outcome.FAILED, error="ConnectionError: refused")
    with pytest.raises(NotifierFailedError) as raised:
        report_delivery(NOTICE, delivery)
    exc = raised.value
    assert (exc.notifier, exc.interrupt_id, exc.attempt) == ("post_inbox_link", "int-1", 3)
    assert exc.__context__ is None and exc.__cause__ is None
    # A prefork pool sends it from the child to the worker by pickle
    again = pickle.loads(pickle.dumps(exc))
    assert (type(again), str(again)) == (NotifierFailedError, str(exc))
