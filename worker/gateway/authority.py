"""Who may act on a run as its operator: an authenticated actor holding one of its flow's
operator roles (``Flow(operator_roles=...)``, ``operator`` by default).

Cancel, pause and retry ask here inside their own transaction, before they change anything,
and record the actor that authenticated as ``kind:id``. A refusal changes nothing but the
run's audit record: one ``operator_refused`` event (at most ``MAX_REFUSALS`` per run, so
that junk cannot grow a run's record without bound). interlude's own decisions (the expiry
policy as ``system:expiry``) do not come through here: no actor can hold those ids.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from sqlalchemy.orm import Session

from models import events as event_store
from models import runs as run_store
from models.db import transaction
from models.enums import EventKind
from models.errors import (
    ConfigurationError,
    FlowVersionError,
    InvalidInputError,
    OperatorDeniedError,
    OperatorRefusedError,
    OperatorUnauthenticatedError,
    UnknownFlowError,
)
from models.identity import actor_id_problem, normal_actor_id
from models.tables import Run
from worker.flows.flow import get_flow
from worker.gateway.actors import Credential, authenticate

log = logging.getLogger(__name__)

ActorType = Literal["human", "service"]
ACTOR_TYPES: tuple[str, ...] = ("human", "service")
# What the events' actor column holds.
MAX_LABEL = 200
MAX_REFUSALS = 100
UNAUTHENTICATED = "unknown actor, revoked actor or bad credential"


@dataclass(frozen=True)
class Claim:
    """Who says they act: an actor id in its normal form, and their kind."""

    action: str
    actor_id: str
    actor_type: str

    @property
    def label(self) -> str:
        """How the actor is recorded: ``human:carol``."""
        return f"{self.actor_type}:{self.actor_id}"


def claim(action: str, actor: object, actor_type: object = "human") -> Claim:
    """The claim, or InvalidInputError (one line) when it cannot name an actor at all.

    The reserved prefixes (``system:``, ``worker:``) are refused here: nobody acts as
    interlude.
    """
    problem = actor_id_problem(actor)
    if problem is not None or not isinstance(actor, str):
        raise InvalidInputError(detail=f"{action} needs the acting actor's id: {problem}")
    if actor_type not in ACTOR_TYPES:
        raise InvalidInputError(
            detail=f"{action}: the actor type must be one of {', '.join(ACTOR_TYPES)}"
        )
    made = Claim(action, normal_actor_id(actor), str(actor_type))
    if len(made.label) > MAX_LABEL:
        raise InvalidInputError(
            detail=f"{action}: {made.actor_type}:ID must be at most {MAX_LABEL} characters"
        )
    return made


def authorize(session: Session, run_id: str, who: Claim, credential: Credential) -> Run:
    """The run, once ``who`` authenticated and holds one of its flow's operator roles.

    Raises OperatorUnauthenticatedError before telling whether the run exists, then
    RunNotFoundError, then OperatorDeniedError. The actor row stays locked for share until
    the caller's transaction ends (a revoke is ordered after the action, not inside it).
    """
    actor = authenticate(session, who.actor_id, credential)
    if actor is None:
        raise OperatorUnauthenticatedError(
            action=who.action, run_id=run_id, outcome="unauthenticated", reason=UNAUTHENTICATED
        )
    if actor.kind != who.actor_type:
        # Recorded as who acted: a service's credential never acts as a person, nor back.
        raise OperatorUnauthenticatedError(
            action=who.action,
            run_id=run_id,
            outcome="unauthenticated",
            reason=f"actor {actor.id} is a {actor.kind}, not a {who.actor_type}: "
            f"act as {actor.kind}:{actor.id}",
        )
    run = run_store.load_run(session, run_id)
    roles = operator_roles(run)
    if not set(actor.roles or []) & set(roles):
        raise OperatorDeniedError(
            action=who.action,
            run_id=run_id,
            outcome="denied",
            reason=f"actor {actor.id} holds none of the operator roles {sorted(roles)} "
            f"of flow {run.flow_name}",
        )
    return run


def operator_roles(run: Run) -> tuple[str, ...]:
    """The operator roles of the flow version the run is pinned to (or of the newest version
    here, if that one is retired). A flow not loaded in this process cannot say who operates
    it: ConfigurationError, and nobody may act until INTERLUDE_FLOWS names it."""
    try:
        flow = get_flow(run.flow_name, run.flow_version, run_id=run.id)
    except FlowVersionError:
        flow = get_flow(run.flow_name)
    except UnknownFlowError:
        raise ConfigurationError(
            f"cannot tell who operates run {run.id}: flow {run.flow_name!r} is not loaded here "
            "(name its module in INTERLUDE_FLOWS); nothing changed"
        ) from None
    return flow.operator_roles


def record_refusal(refusal: OperatorRefusedError, who: Claim) -> None:
    """The refused action, on the run's record (if the run exists and has room for it).

    Its actor is the one claimed: when the outcome is ``unauthenticated``, nobody proved it.
    """
    run_id = str(refusal.fields.get("run_id"))
    with transaction() as session:
        if run_store.find_run(session, run_id) is None:
            return
        if event_store.count_events(session, run_id, EventKind.OPERATOR_REFUSED) >= MAX_REFUSALS:
            return
        event_store.record_event(
            session,
            run_id,
            actor=who.label,
            kind=EventKind.OPERATOR_REFUSED,
            detail={
                "action": who.action,
                "outcome": refusal.fields.get("outcome"),
                "reason": refusal.fields.get("reason"),
            },
        )
    # INFO, as the gateway logs refused resumes: the command's user reads the error line.
    log.info(
        "operator action refused",
        extra={
            "action": "operator_refused",
            "run_id": run_id,
            "operator_action": who.action,
            "actor": who.label,
            "outcome": refusal.fields.get("outcome"),
        },
    )
