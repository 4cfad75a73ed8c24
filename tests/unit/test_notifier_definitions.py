"""A flow's notifiers: each has a name on its flow, which its notify tasks carry, so one name is
one notifier; a second one under a name already taken is refused where it is written."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from models.contracts import InterruptView
from models.errors import FlowDefinitionError, UnknownNotifierError
from tests.scratch_flows import scratch_registry
from worker.flows.flow import Flow, notifier_name


@pytest.fixture(autouse=True)
def scratch() -> Iterator[None]:
    with scratch_registry():
        yield


def tell(interrupt: InterruptView) -> None:
    return None


def other(interrupt: InterruptView) -> None:
    return None


class Pager:
    def __call__(self, interrupt: InterruptView) -> None:
        return None


def _made(name: str) -> Any:
    """A notifier made by a helper: every one it makes has one qualified name."""

    def post(interrupt: InterruptView) -> None:
        return None

    return post


def test_a_notifier_is_named_by_its_qualified_name() -> None:
    assert notifier_name(tell) == "tell"
    assert notifier_name(_made("a")) == "_made.<locals>.post"
    assert notifier_name(Pager()) == "Pager"


def test_each_notifier_is_found_by_its_name() -> None:
    flow = Flow("notifydef_found", version=2)
    flow.notifier(tell)
    flow.notifier(other)
    assert flow.notifiers == [tell, other]
    assert flow.get_notifier("other") is other
    # A name this flow does not have (say, the worker runs older code) is a typed error
    with pytest.raises(UnknownNotifierError) as unknown:
        flow.get_notifier("gone")
    assert str(unknown.value) == (
        "flow 'notifydef_found' v2 has no notifier 'gone' here; its notifiers: tell, other"
    )


def test_two_notifiers_under_one_name_are_refused_in_one_line() -> None:
    # Given a flow with a notifier made by a helper
    flow = Flow("notifydef_twice", version=3)
    flow.notifier(_made("chat"))
    # When the helper's second notifier is registered, Then it is refused, naming both modules
    with pytest.raises(FlowDefinitionError) as refused:
        flow.notifier(_made("mail"))
    message = str(refused.value)
    assert "\n" not in message
    assert message == (
        "flow definition is invalid: flow 'notifydef_twice' v3: two notifiers named "
        f"'_made.<locals>.post' (in {__name__} and {__name__}): a notify task finds its "
        "notifier by that name; give one another name"
    )
    assert len(flow.notifiers) == 1
    # ... and so is a second instance of one callable class
    flow.notifier(Pager())
    with pytest.raises(FlowDefinitionError, match="two notifiers named 'Pager'"):
        flow.notifier(Pager())


def test_the_same_notifier_registered_again_is_kept_once() -> None:
    flow = Flow("notifydef_again")
    flow.notifier(tell)
    flow.notifier(tell)
    assert flow.notifiers == [tell]


def test_a_notifier_is_a_function() -> None:
    flow = Flow("notifydef_not_a_function")
    with pytest.raises(FlowDefinitionError, match="notifier 'nobody' is not a function"):
        flow.notifier("nobody")  # type: ignore[arg-type]
    assert flow.notifiers == []
