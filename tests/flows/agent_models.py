"""Models for the agent example's tests, named by ``AGENT_MODEL=module:function``.

They run in the test process (the steps are drained there), so a list counts their calls.
"""

from __future__ import annotations

from typing import Any

from examples.agent import scripted_model

# The length of the conversation at each call, in order.
calls: list[int] = []


def counting_model(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """The scripted model, counted."""
    calls.append(len(conversation))
    return scripted_model(conversation)


def careless_model(conversation: list[dict[str, Any]]) -> dict[str, Any]:
    """Proposes a call its tool refuses first; told so, it answers as the scripted model."""
    calls.append(len(conversation))
    if len(conversation) == 1:
        return {"tool": "refund", "args": {"order": "A-1001", "amount": -5}}
    return scripted_model(conversation)
