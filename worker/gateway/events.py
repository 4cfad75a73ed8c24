"""Events: sent to a run by a service or a person, taken by a step that waits for them.

``send_event`` goes through the gateway's own checks, recorded as an attempt like a resume:
the sender authenticates, its idempotency key binds to what it sent (a second send is a
duplicate), the run must be unfinished, the flow must declare the event, the sender must hold
one of its roles, and the payload must fit its model — all decided at once. An event the run
waits on answers its ask then and there; one it does not wait on yet is kept in the run's
mailbox (``kept``), and answers the ask when the run makes it: the worker delivers it right
after the run starts waiting (``deliver_kept``), as the sender's answer, with the time it
arrived. A sender and a run racing (the run starting to wait as the event is kept) are
settled by both looking again after their own commit: one of them delivers it, once (the
delivery consumes the kept event in the transaction that accepts it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session

from models import attempts as attempt_store
from models import events as event_store
from models import interrupts as interrupt_store
from models import mailbox
from models import runs as run_store
from models.contracts import ResumeResult, json_copy
from models.db import transaction
from models.enums import EventKind, InterruptKind, ResumeOutcome, RunState
from models.errors import InterludeError
from models.identity import normal_actor_id
from models.storable import unstorable_where
from models.tables import Interrupt, Run
from statemachine import TERMINAL_STATES
from worker.engine import dispatch
from worker.flows.eventdefs import MAILBOX_LIMIT
from worker.flows.flow import continuation
from worker.flows.schemas import describe_errors
from worker.gateway import attempt_records as attempts
from worker.gateway.actors import Credential, verified
from worker.gateway.checks import Refusal
from worker.gateway.parsing import MAX_ID, read_payload
from worker.gateway.submit import resume_as_system

log = logging.getLogger(__name__)
EVENT_SCHEMA_VERSION = "event.v1"
TERMINAL = frozenset(state.value for state in TERMINAL_STATES)


def send_event(
    run_id: str,
    name: str,
    payload: Any,
    *,
    actor: str,
    credential: str,
    idempotency_key: str,
    actor_type: str = "service",
) -> ResumeResult:
    """Send event ``name`` with ``payload`` to run ``run_id`` as ``actor``; never raises.

    ``accepted``: the run waited on it and goes on; ``kept``: it waits in the run's mailbox
    until the run asks for it; any other outcome is a refusal, recorded with its reason.
    """
    envelope = {
        "schema_version": EVENT_SCHEMA_VERSION,
        "run_id": run_id,
        "event": name,
        "payload": payload,
        "actor": {"type": actor_type, "id": actor},
        "idempotency_key": idempotency_key,
    }
    attempt = attempts.Attempt(
        envelope,
        Credential(credential),
        # Filed under at most MAX_ID characters of each, as a resume is: a longer key is
        # refused below, and recording that refusal must not fail on the column's length.
        run_id=_text(run_id),
        key=_text(idempotency_key),
    )
    try:
        envelope = json_copy(envelope)
        where = unstorable_where(envelope)
        if where is not None:
            # Text no database stores (a NUL: the lookup of the sender's key failed, and so
            # did recording that failure) is refused as the gateway refuses it in a contract,
            # the envelope and the ids it is filed under kept with that text escaped.
            attempt.payload, fields, _ = read_payload(envelope)
            attempt.run_id = _text(fields.get("run_id"))
            attempt.key = _text(fields.get("idempotency_key"))
            reason = f"event holds NUL or unpaired surrogate characters{where}"
            return attempts.record(attempt, ResumeOutcome.MALFORMED, reason, claim=False)
        attempt.payload = envelope
        attempt.payload_hash = attempts.payload_hash(envelope)
        attempt.parsed = True
        result, released, kept_for = _send(envelope, attempt)
    except Exception as exc:
        return attempts.last_resort(attempt, exc)
    if released is not None:
        dispatch.publish_step(
            released.id, flow=released.flow_name, step=released.next_step, resume=True
        )
    if kept_for is not None:
        # Looked at again after the commit: a run that started waiting meanwhile takes it now.
        deliver_kept(kept_for, [name])
    return result


def _text(value: object) -> str | None:
    return value[:MAX_ID] if isinstance(value, str) else None


def _send(
    envelope: dict[str, Any], attempt: attempts.Attempt
) -> tuple[ResumeResult, Run | None, str | None]:
    """The send's decision: its result, the run it released, the run it kept an event for."""
    run_id, name, payload = envelope["run_id"], envelope["event"], envelope["payload"]
    sender_type, sender = envelope["actor"]["type"], envelope["actor"]["id"]
    key = envelope["idempotency_key"]
    problems = [
        what
        for what, ok in (
            ("run_id", isinstance(run_id, str) and 0 < len(run_id) <= 200),
            ("event", isinstance(name, str) and 0 < len(name) <= 200),
            ("actor", isinstance(sender, str) and 0 < len(sender) <= 200),
            ("actor type", sender_type in ("human", "service")),
            ("idempotency_key", isinstance(key, str) and 0 < len(key) <= 200),
            ("payload", isinstance(payload, dict)),
        )
        if not ok
    ]
    if problems:
        reason = f"event is malformed: {', '.join(problems)} missing or invalid"
        return attempts.record(attempt, ResumeOutcome.MALFORMED, reason, claim=False), None, None
    with transaction() as session:
        row, original = attempt_store.actor_and_original(
            session, normal_actor_id(sender), attempt.key or ""
        )
        actor = verified(row, attempt.credential)
        if actor is None or actor.kind != sender_type:
            reason = "unknown actor, revoked actor, bad credential or wrong actor type"
            result = attempts.record_in(
                session, attempt, ResumeOutcome.UNAUTHENTICATED, reason, claim=False
            )
            return result, None, None
        attempt.actor_id = actor.id
        if original is not None:
            return attempts.repeat(session, attempt, original), None, None
        try:
            return _decide(session, attempt, actor.id, actor.kind, set(actor.roles or []))
        except Refusal as refusal:
            return attempts.record_in(session, attempt, refusal.outcome, refusal.reason), None, None


def _decide(
    session: Session, attempt: attempts.Attempt, sender: str, kind: str, roles: set[str]
) -> tuple[ResumeResult, Run | None, str | None]:
    envelope = attempt.payload
    run_id, name = envelope["run_id"], envelope["event"]
    run = run_store.find_run(session, run_id)
    if run is None:
        raise Refusal(ResumeOutcome.STALE, f"no run {run_id}")
    if run.state in TERMINAL:
        raise Refusal(ResumeOutcome.STALE, f"run {run_id} is {run.state}: it takes no events")
    try:
        flow, _ = continuation(run.flow_name, run.flow_version, run_id=run.id)
    except InterludeError:
        raise Refusal(
            ResumeOutcome.UNKNOWN_SCHEMA,
            f"flow {run.flow_name!r} v{run.flow_version} is not loaded here (INTERLUDE_FLOWS): "
            "its events cannot be checked; nothing changed",
        ) from None
    event = flow.events.get(name)
    if event is None:
        known = ", ".join(sorted(flow.events)) or "none"
        raise Refusal(
            ResumeOutcome.INVALID_INPUT,
            f"flow {flow.name!r} takes no event {name!r} (its events: {known})",
        )
    if not roles & set(event.roles):
        raise Refusal(
            ResumeOutcome.DENIED, f"actor {sender} holds none of the roles {list(event.roles)}"
        )
    # Kept, shown and handed to the step as the gateway keeps an answer: a credential pasted
    # into it goes no further than here.
    sent = attempt.credential.redacted(envelope["payload"])
    try:
        payload = json_copy(event.input.model_validate(sent).model_dump(mode="json"))
    except ValidationError as exc:
        raise Refusal(
            ResumeOutcome.INVALID_INPUT, f"event {name!r}: {describe_errors(exc)}"
        ) from None
    except ValueError:
        raise Refusal(
            ResumeOutcome.INVALID_INPUT, "payload holds a number that is not finite"
        ) from None
    if mailbox.count_kept(session, run.id) >= MAILBOX_LIMIT:
        raise Refusal(
            ResumeOutcome.DENIED,
            f"run {run.id} keeps {MAILBOX_LIMIT} events it has not asked for: no more are kept",
        )
    kept = mailbox.keep(
        session, run_id=run.id, name=name, payload=payload, sender=sender, sender_kind=kind
    )
    asked = _asked(session, run, name)
    if asked is not None:
        done = resume_as_system(
            session,
            asked,
            actor_id=sender,
            actor_type=kind,
            input=payload,
            reason=f"event {name!r} refused",
            given=True,
        )
        if done.result.accepted:
            mailbox.consume(session, kept.id, asked.id)
            _record_delivery(session, run.id, asked, sender, kept.arrived_at)
            result = attempts.record_in(
                session,
                attempt,
                ResumeOutcome.ACCEPTED,
                f"event {name!r} answered interrupt {asked.id}",
            )
            return result, (run if done.released else None), None
    result = attempts.record_in(
        session,
        attempt,
        ResumeOutcome.KEPT,
        f"run {run.id} does not wait on event {name!r} yet: kept until it asks",
    )
    return result, None, run.id


def _record_delivery(
    session: Session, run_id: str, asked: Interrupt, sender: str, arrived_at: datetime
) -> None:
    event_store.record_event(
        session,
        run_id,
        actor=sender,
        kind=EventKind.EVENT_DELIVERED,
        detail={
            "event": asked.name,
            "interrupt_id": asked.id,
            "arrived_at": arrived_at.isoformat(),
        },
    )


def _asked(session: Session, run: Run, name: str) -> Interrupt | None:
    """The run's pending wait for event ``name``, locked, if it waits on it now."""
    if run.state != RunState.WAITING.value:
        return None
    for interrupt in interrupt_store.pending_of_run(session, run.id, locked=True):
        if interrupt.name == name and interrupt.kind == InterruptKind.EVENT.value:
            return interrupt
    return None


def deliver_kept(run_id: str, names: Iterable[str]) -> bool:
    """Answer the run's pending waits for ``names`` from its mailbox, oldest event first;
    True if the run was released (its step is published)."""
    released: Run | None = None
    for name in names:
        with transaction() as session:
            run = run_store.find_run(session, run_id)
            asked = _asked(session, run, name) if run is not None else None
            kept = mailbox.oldest_kept(session, run_id, name) if asked is not None else None
            if run is None or asked is None or kept is None:
                continue
            done = resume_as_system(
                session,
                asked,
                actor_id=kept.sender,
                actor_type=kept.sender_kind,
                input=kept.payload,
                reason=f"event {name!r} kept since {kept.arrived_at.isoformat()} refused",
                given=True,
            )
            if not done.result.accepted:
                log.warning(
                    "kept event %s for run %s was refused by its ask: %s",
                    name,
                    run_id,
                    done.result.reason,
                    extra={"action": "event_refused", "run_id": run_id},
                )
                continue
            mailbox.consume(session, kept.id, asked.id)
            _record_delivery(session, run_id, asked, kept.sender, kept.arrived_at)
            log.info(
                "kept event %s (from %s, arrived %s) answered the run's ask",
                name,
                kept.sender,
                kept.arrived_at.isoformat(),
                extra={"action": "event_delivered", "run_id": run_id},
            )
            if done.released:
                released = run
    if released is None:
        return False
    dispatch.publish_step(
        released.id, flow=released.flow_name, step=released.next_step, resume=True
    )
    return True
