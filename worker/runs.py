"""Starting, reading, pausing and cancelling runs from application code."""

from __future__ import annotations

import logging
from typing import Any

from pydantic import ValidationError
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from models import checkpoints as checkpoint_store
from models import forks as fork_store
from models import interrupts as interrupt_store
from models import mailbox, queries
from models import runs as run_store
from models.contracts import (
    CheckpointView,
    EffectView,
    EventView,
    KeptEventView,
    RunSummary,
    RunView,
    json_copy,
)
from models.db import transaction
from models.enums import EventKind, RunState
from models.errors import (
    InvalidInputError,
    InvalidTransitionError,
    OperatorRefusedError,
    StaleStateError,
    StartRefusedError,
)
from models.identity import actor_id_problem, normal_actor_id
from models.redaction import redacted
from models.storable import storable_text, unstorable_where
from models.tables import Actor
from worker import arguments
from worker.ask_groups import group_views
from worker.engine import dispatch
from worker.flows.flow import get_flow
from worker.gateway import authority
from worker.gateway.actors import Credential, authenticate
from worker.gateway.authority import ActorType
from worker.interrupts import view as interrupt_view

log = logging.getLogger(__name__)
MAX_KEY = 200
# A cancel's reason is also the run's error.
MAX_REASON = 2000
CANCEL_ATTEMPTS = 5


def _checked_input(flow_name: str, value: Any) -> Any:
    try:
        data = json_copy(value)
    except (TypeError, ValueError) as exc:
        raise InvalidInputError(detail=f"input for flow {flow_name!r} is not JSON: {exc}") from None
    where = unstorable_where(data)
    if where is not None:
        # PostgreSQL refuses both in JSON (SQLite would keep them): refused alike on either,
        # as the resume gateway refuses them in a contract.
        raise InvalidInputError(
            detail=f"input for flow {flow_name!r} holds NUL or unpaired surrogate characters{where}"
        )
    return data


def checked_reason(action: str, reason: object) -> None:
    """InvalidInputError unless ``reason`` is text an operator action can record."""
    if not isinstance(reason, str):
        raise InvalidInputError(detail=f"a {action}'s reason must be text")
    if len(reason) > MAX_REASON:
        raise InvalidInputError(detail=f"a {action}'s reason is at most {MAX_REASON} characters")
    if not storable_text(reason):
        raise InvalidInputError(
            detail=f"a {action}'s reason holds NUL or unpaired surrogate characters"
        )


def enqueue_run(
    flow_name: str,
    input: Any = None,
    idempotency_key: str | None = None,
    *,
    started_by: str | None = None,
    budget: float | None = None,
) -> str:
    """Start a run of the newest version of ``flow_name``; the same key returns the same run."""
    flow = get_flow(arguments.text("flow_name", flow_name))
    data = _checked_input(flow_name, {} if input is None else input)
    if flow.input_model is not None:
        try:
            data = flow.input_model.model_validate(data).model_dump(mode="json")
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "input"
            raise InvalidInputError(detail=f"{where}: {first['msg']}") from None
        # The model may have turned "inf" or "1e309" into a float no database stores as such.
        data = _checked_input(flow_name, data)
    # Text no database can hold is refused here: PostgreSQL fails on it when the key is looked up.
    idempotency_key = arguments.optional_text("idempotency key", idempotency_key)
    if idempotency_key is not None and not 0 < len(idempotency_key) <= MAX_KEY:
        raise InvalidInputError(detail=f"idempotency key must be 1 to {MAX_KEY} characters")
    if budget is not None:
        budget = arguments.amount("budget", budget)
    if started_by is not None:
        # Compared with the responder for separation of duties: the same form as actor ids.
        problem = actor_id_problem(started_by)
        if problem is not None:
            raise InvalidInputError(detail=f"started_by: {problem}")
        started_by = normal_actor_id(started_by)
    if idempotency_key is not None:
        existing = _by_key(idempotency_key, flow_name)
        if existing is not None:
            return existing
    try:
        with transaction(autocommit=True) as session:
            run = run_store.insert_run(
                session,
                flow_name=flow.name,
                flow_version=flow.version,
                input=data,
                first_step=flow.first_step,
                idempotency_key=idempotency_key,
                started_by=started_by,
                budget=budget if budget is not None else flow.budget,
            )
            run_id = run.id
    except IntegrityError:
        existing = _by_key(idempotency_key, flow_name) if idempotency_key else None
        if existing is None:
            raise
        return existing
    dispatch.publish_step(run_id, flow=flow.name, step=flow.first_step)
    return run_id


def start_run(
    flow_name: str,
    input: Any = None,
    idempotency_key: str | None = None,
    *,
    actor: str,
    credential: str,
    actor_type: ActorType = "service",
) -> tuple[str, bool]:
    """``enqueue_run`` as an actor who authenticates and holds one of the flow's operator or
    starter roles (``Flow(starter_roles=...)``): the run, and whether this call started it
    (False: the key started it before). The run records the actor as its starter.

    Refused with StartRefusedError (logged; nothing started) when the actor does not
    authenticate or holds none of those roles, and with InvalidInputError when the key
    started a run of another starter: one starter's key never hands over another's run.
    """
    secret = Credential(credential)
    del credential
    who = authority.claim("start", actor, actor_type)
    flow = get_flow(arguments.text("flow_name", flow_name))
    allowed = (*flow.operator_roles, *flow.starter_roles)
    with transaction() as session:
        found = authenticate(session, who.actor_id, secret)
        problem, outcome = _start_problem(found, who, flow.name, allowed)
    if problem is not None:
        log.info(
            "start refused",
            extra={"action": "start_refused", "flow": flow.name, "actor": who.label},
        )
        raise StartRefusedError(flow=flow.name, outcome=outcome, reason=problem)
    key = arguments.optional_text("idempotency key", idempotency_key)
    started_before = key is not None and 0 < len(key) <= MAX_KEY and bool(_by_key(key, flow.name))
    run_id = enqueue_run(flow.name, input, key, started_by=who.actor_id)
    if started_before:
        with transaction(readonly=True) as session:
            starter = run_store.load_run(session, run_id).started_by
        if starter != who.actor_id:
            raise InvalidInputError(
                detail=f"idempotency key {key!r} already started a run of another starter"
            )
    return run_id, not started_before


def _start_problem(
    found: Actor | None, who: authority.Claim, flow: str, allowed: tuple[str, ...]
) -> tuple[str | None, str]:
    """Why ``who`` may not start a run of ``flow`` (None: it may), and the outcome's name."""
    if found is None:
        return authority.UNAUTHENTICATED, "unauthenticated"
    if found.kind != who.actor_type:
        return f"actor {found.id} is a {found.kind}, not a {who.actor_type}", "unauthenticated"
    if not set(found.roles or []) & set(allowed):
        roles = sorted(set(allowed))
        return f"actor {found.id} holds none of the roles {roles} that start flow {flow}", "denied"
    return None, "started"


def _by_key(key: str, flow_name: str) -> str | None:
    with transaction(readonly=True) as session:
        found = run_store.find_by_key(session, key)
    if found is None:
        return None
    run_id, found_flow = found
    if found_flow != flow_name:
        raise InvalidInputError(
            detail=f"idempotency key {key!r} already started a run of flow {found_flow!r}"
        )
    return run_id


def get_run(run_id: str) -> RunView:
    with transaction(readonly=True) as session:
        run = run_store.load_run(session, run_id)
        checkpoint = checkpoint_store.latest_checkpoint(session, run)
        pending = interrupt_store.pending_of_run(session, run_id)
        groups = group_views(interrupt_store.group_asks(session, run_id, checkpoint.id))
        kept = [
            KeptEventView(name=k.name, sender=k.sender, arrived_at=k.arrived_at, payload=k.payload)
            for k in mailbox.kept_of_run(session, run_id)
        ]
        return RunView(
            id=run.id,
            flow_name=run.flow_name,
            flow_version=run.flow_version,
            state=run.state,
            state_version=run.state_version,
            input=run.input,
            flow_state=checkpoint.state,
            next_step=run.next_step,
            output=run.output,
            error=run.error,
            started_by=run.started_by,
            budget_allowance=run.budget_allowance,
            budget_consumed=run.budget_consumed,
            pause_requested_by=run.pause_requested_by,
            checkpoints=checkpoint.seq + 1,
            checkpoint_id=checkpoint.id,
            pending_interrupts=[interrupt_view(row) for row in pending],
            created_at=run.created_at,
            updated_at=run.updated_at,
            finished_at=run.finished_at,
            ask_groups=groups,
            kept_events=kept,
            forked_from=run.forked_from,
            forked_at=run.forked_at,
            forks=fork_store.forks_of(session, run_id),
        )


def list_runs(
    state: RunState | str | None = None, flow: str | None = None, limit: int = 100
) -> list[RunSummary]:
    """Runs, newest first."""
    flow = arguments.optional_text("flow", flow)
    limit = arguments.count("limit", limit)
    wanted: RunState | None = None
    if state is not None:
        try:
            wanted = RunState(state)
        except ValueError:
            allowed = ", ".join(s.value for s in RunState)
            raise InvalidInputError(detail=f"unknown state {state!r}; one of {allowed}") from None
    with transaction(readonly=True) as session:
        return [
            RunSummary.model_validate(row, from_attributes=True)
            for row in queries.list_runs(session, state=wanted, flow=flow, limit=limit)
        ]


def list_checkpoints(run_id: str) -> list[CheckpointView]:
    with transaction(readonly=True) as session:
        run_store.load_run(session, run_id)
        return [_view(CheckpointView, row) for row in queries.checkpoints_of(session, run_id)]


def list_events(run_id: str) -> list[EventView]:
    with transaction(readonly=True) as session:
        run_store.load_run(session, run_id)
        return [_view(EventView, row) for row in queries.events_of(session, run_id)]


def list_effects(run_id: str) -> list[EffectView]:
    with transaction(readonly=True) as session:
        run_store.load_run(session, run_id)
        return [_view(EffectView, row) for row in queries.effects_of(session, run_id)]


def _view(model: Any, row: Any) -> Any:
    return model.model_validate(row, from_attributes=True)


def pause_run(run_id: str, *, actor: str, credential: str, actor_type: ActorType = "human") -> str:
    """Ask the run to stop at its next step boundary with an ``operator`` interrupt.

    ``actor`` must authenticate with ``credential`` and hold one of the flow's operator roles
    (else OperatorUnauthenticatedError / OperatorDeniedError, recorded, nothing else
    changed). Returns the actor as recorded, ``kind:id``.
    """
    secret = Credential(credential)
    del credential
    who = authority.claim("pause", actor, actor_type)
    try:
        with transaction() as session:
            run = authority.authorize(session, run_id, who, secret)
            if not run_store.request_pause(session, run_id, actor=who.label):
                raise InvalidTransitionError(run_id=run_id, trigger="pause", found=run.state)
    except OperatorRefusedError as refusal:
        authority.record_refusal(refusal, who)
        raise
    return who.label


def cancel_run(
    run_id: str,
    *,
    actor: str,
    credential: str,
    reason: str = "",
    actor_type: ActorType = "human",
) -> str:
    """Cancel a run: close its pending interrupts and fence any step still in flight.

    ``actor`` must authenticate with ``credential`` and hold one of the flow's operator roles
    (else OperatorUnauthenticatedError / OperatorDeniedError, recorded, nothing else
    changed). Returns the actor as recorded, ``kind:id``.
    """
    secret = Credential(credential)
    del credential
    who = authority.claim("cancel", actor, actor_type)
    checked_reason("cancel", reason)
    try:
        for _ in range(CANCEL_ATTEMPTS):
            try:
                with transaction() as session:
                    authority.authorize(session, run_id, who, secret)
                    _cancel(session, run_id, who.label, reason)
                return who.label
            except StaleStateError:
                continue  # a step committed meanwhile; look again
    except OperatorRefusedError as refusal:
        authority.record_refusal(refusal, who)
        raise
    raise StaleStateError(run_id=run_id, expected="a stable state", found="constant movement")


def _cancel(session: Session, run_id: str, actor: str, reason: str) -> None:
    # The reason is also the run's error, shown to whoever reads the run.
    reason = redacted(reason)
    run = run_store.load_run(session, run_id)
    run_store.run_destination(EventKind.CANCEL, run.state, run_id)
    # Interrupt rows before the run row, in the order the gateway and the sweep take them:
    # the opposite order deadlocks with a resume or a sweep of the same run.
    _hold_pending(session, run_id)
    run_store.move(
        session, run, EventKind.CANCEL, actor=actor, detail={"reason": reason}, error=reason or None
    )
    # All of them in one statement, whatever the reads above saw.
    interrupt_store.close_pending(session, run_id, "cancel", resolved_by=actor)


def _hold_pending(session: Session, run_id: str) -> None:
    """Lock every pending interrupt of the run, a successor committed meanwhile included.

    A sweep's escalation and a renewed review in the gateway hold the interrupt they
    supersede until they commit its pending successor; neither touches the run row. On
    PostgreSQL (READ COMMITTED) the locked read waits for them, then drops the superseded row,
    but its snapshot predates the successor: the run would end cancelled beside a live pending
    interrupt. So look again, without waiting, until every pending interrupt is one this
    transaction holds. Then nothing in flight can supersede one, and a new interrupt needs a
    move of the run, which the cancel's compare-and-set rules out. (SQLite serialises the
    writers: the second read finds what the first did.)
    """
    held: set[str] = set()
    for _ in range(CANCEL_ATTEMPTS):
        held.update(i.id for i in interrupt_store.pending_of_run(session, run_id, locked=True))
        if {i.id for i in interrupt_store.pending_of_run(session, run_id)} <= held:
            return
    raise StaleStateError(
        run_id=run_id, expected="its pending interrupts to hold still", found="new ones"
    )
