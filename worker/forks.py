"""Fork a run from a step: a new run starts from the checkpoint before that step.

The fork runs the origin's flow version from there, with the origin's input or a new one,
linked to its origin both ways (``forked_from`` on the fork, a ``forked`` event on the
origin). Effects the origin applied from that checkpoint on are not repeated unless asked
(``repeat_effects``): the fork finds their receipts. Forking is an operator's action: the
actor authenticates and holds one of the flow's operator roles; refusals are recorded.

A cancelled run is not resumed in place: its interrupts were closed, its effects may have
been reconciled by people acting on the cancellation, and a terminal state is final in the
record. Fork it from the step it stopped at instead.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from models import forks as fork_store
from models.db import transaction
from models.errors import InterludeError, InvalidInputError, OperatorRefusedError
from worker.engine import dispatch
from worker.flows.flow import get_flow
from worker.gateway import authority
from worker.gateway.actors import Credential
from worker.gateway.authority import ActorType


def fork_run(
    run_id: str,
    *,
    from_step: str,
    actor: str,
    credential: str,
    input: Any = None,
    repeat_effects: bool = False,
    actor_type: ActorType = "human",
) -> str:
    """Start a new run from the checkpoint of ``run_id`` before ``from_step``; its id.

    ``input`` replaces the origin's (validated by the flow's input model); ``repeat_effects``
    lets the fork call again the effects the origin applied from there on.
    """
    secret = Credential(credential)
    del credential
    who = authority.claim("fork", actor, actor_type)
    try:
        with transaction() as session:
            origin = authority.authorize(session, run_id, who, secret)
            at = fork_store.fork_point(session, origin.id, from_step)
            if at is None:
                raise InvalidInputError(
                    detail=f"run {origin.id} never reached step {from_step!r}: nothing to fork from"
                )
            given = origin.input if input is None else _checked_input(origin, input)
            fork, _ = fork_store.insert_fork(
                session,
                origin,
                at,
                input=given,
                started_by=who.label,
                copy_effects=not repeat_effects,
            )
            fork_id, flow, step = fork.id, fork.flow_name, fork.next_step
    except OperatorRefusedError as refusal:
        authority.record_refusal(refusal, who)
        raise
    dispatch.publish_step(fork_id, flow=flow, step=step)
    return fork_id


def _checked_input(origin: Any, value: Any) -> Any:
    try:
        flow = get_flow(origin.flow_name, origin.flow_version)
    except InterludeError:
        return value  # checked by the flow's own steps where its code runs
    if flow.input_model is None:
        return value
    try:
        return flow.input_model.model_validate(value).model_dump(mode="json")
    except ValidationError as exc:
        raise InvalidInputError(detail=f"fork input: {exc.errors()[0]['msg']}") from None
