"""Sweeping expired interrupts: due rows in bounded batches, each policy applied exactly once.

Due rows are read through the ``(status, deadline)`` index, oldest deadline first, so a sweep
costs what is due, not what is waiting. When a sweep cannot apply an interrupt's policy (a
``default`` this process cannot check: without the flow's code, with the interrupt's schema
unknown or changed here, or while the revalidation fails; or a policy that raised), the
interrupt stays pending past its deadline and is put off (``put_off_until``): looked at again
after as long as it has been overdue, at least a minute and at most an hour, so that rows
waiting on a fix are not read and warned about at every sweep. ``interlude sweep`` brings them
all forward first (an operator runs it after the fix).

On PostgreSQL a batch is locked with ``FOR UPDATE SKIP LOCKED``: concurrent sweepers take
disjoint rows, and the gateway, which locks the same row before it accepts a resume, is
serialised with them. On SQLite every write transaction begins IMMEDIATE, so a batch is read
and applied under the single write lock. A batch is applied at once, the runs it ends and
the interrupts it escalates written together (``models.endings``, ``models.successors``: one
statement each on PostgreSQL); if one of its interrupts does not apply cleanly, it is
applied again with each interrupt in its own savepoint, so one bad row does not stop its
batch; a row that cannot even be read (SQLite keeps JSON as text that a hand edit can break)
is put off like a failed one.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy.orm import Session

from models import endings as ending_store
from models import events as event_store
from models import interrupts as interrupt_store
from models import runs as run_store
from models import successors as successor_store
from models.db import transaction, utcnow
from models.enums import EventKind, ExpiryPolicy, RunState
from models.errors import InterludeError
from models.settings import get_settings
from models.tables import Interrupt, Run
from worker import arguments
from worker.engine import dispatch
from worker.flows.flow import get_flow, load_flow_modules
from worker.gateway.submit import SystemDeferred, resume_as_system
from worker.interrupts import notify

log = logging.getLogger(__name__)

SYSTEM_ACTOR = "system:expiry"
# Said of an escalation whose roles no active actor holds.
UNHELD = "no active actor holds any of these roles, so nobody can answer it yet"

# Something to do once the batch has committed: tell notifiers about a new interrupt
# (returns False when this process cannot: counted, not retried), or publish the resume of a
# run answered by its default.
AfterCommit = Callable[[], bool] | dispatch.StepTask
# How long a row the sweep could not handle is put off, at least and at most (put_off_until).
PUT_OFF_AT_LEAST = timedelta(minutes=1)
PUT_OFF_AT_MOST = timedelta(hours=1)


class _Deferred(Exception):
    """Control flow: this interrupt cannot be handled by this process now; leave it pending."""


class _Resolved(Exception):
    """Control flow: the interrupt was resolved meanwhile; there is nothing left to do."""


class _Isolate(Exception):
    """Control flow: an interrupt of a batch applied without savepoints did not apply
    cleanly; the batch is rolled back and applied again, each interrupt in its own savepoint."""


@dataclass(frozen=True)
class SweepReport:
    """What one sweep did. ``deferred`` and ``failed`` interrupts stay pending past their
    deadline, put off for a later sweep; ``not_notified``: escalations (handled) whose flow's
    notifiers this process could not call, because it does not have the flow;
    ``not_published``: default resumes (handled) whose task the broker refused, left for the
    reaper to publish."""

    handled: int = 0
    deferred: int = 0
    failed: int = 0
    not_notified: int = 0
    not_published: int = 0


@dataclass
class _Batch:
    selected: int = 0
    handled: int = 0
    deferred: int = 0
    failed: int = 0
    notify: list[Callable[[], bool]] = field(default_factory=list)
    # The default answers' resumes to publish.
    publish: list[dispatch.StepTask] = field(default_factory=list)


def put_off_until(deadline: datetime, now: datetime) -> datetime:
    """When a sweep looks again at an interrupt it could not handle at ``now``: after as long
    as it has been overdue, at least PUT_OFF_AT_LEAST and at most PUT_OFF_AT_MOST."""
    return now + min(max(now - deadline, PUT_OFF_AT_LEAST), PUT_OFF_AT_MOST)


def sweep_expired(now: datetime | None = None, batch: int | None = None) -> int:
    """Apply the expiry policy of every due interrupt; returns how many were handled.

    ``sweep_report`` says also how many were deferred, failed or not notified.
    """
    return sweep_report(now, batch).handled


def sweep_report(
    now: datetime | None = None, batch: int | None = None, *, bring_forward: bool = False
) -> SweepReport:
    """Apply the expiry policy of every due interrupt; what was done, and what was not.

    Batches of ``batch`` rows (``INTERLUDE_SWEEP_BATCH``) are each one transaction; the sweep
    goes on until a batch comes back short, but starts no new batch once it has run for one
    beat interval (``INTERLUDE_SWEEP_INTERVAL``): beat has sent the next sweep by then. Rows
    it could not handle are put off (``put_off_until``); ``bring_forward`` makes every one
    put off before due now, as ``interlude sweep`` does.
    """
    now = arguments.optional_moment("now", now) or utcnow()
    bring_forward = arguments.flag("bring_forward", bring_forward)
    settings = get_settings()
    # INTERLUDE_SWEEP_BATCH is already in range (models.settings); a batch given here may not be.
    size = settings.sweep_batch if batch is None else arguments.count("sweep batch", batch)
    # The default policy validates its input against schemas that the flow modules register.
    load_flow_modules()
    if bring_forward:
        with transaction() as session:
            interrupt_store.bring_forward(session, now)
    stop_at = time.monotonic() + settings.sweep_interval
    handled = deferred = failed = not_notified = not_published = 0
    while True:
        result = _sweep_batch(now, size)
        not_published += _publish(result.publish)
        not_notified += sum(1 for tell in result.notify if not tell())
        handled += result.handled
        deferred += result.deferred
        failed += result.failed
        if result.selected < size or time.monotonic() >= stop_at:
            return SweepReport(handled, deferred, failed, not_notified, not_published)


def _publish(resumes: list[dispatch.StepTask]) -> int:
    """Publish the resumes of a batch's default answers; how many the broker refused.

    The first refusal ends the publishing: that run and those after it are resuming,
    unclaimed, and the reaper publishes them again once their dispatch is old enough.
    """
    unsent = dispatch.publish_until_refused(resumes)
    if len(unsent) > 1:
        log.warning(
            "%d more resume(s) left for the reaper to publish",
            len(unsent) - 1,
            extra={"action": "publish_deferred"},
        )
    return len(unsent)


class _Together:
    """What a batch writes together rather than one by one: the runs it ends (expired or
    cancelled, ``ending_store.end_runs``) and the interrupts it escalates
    (``successor_store.supersede_all``), one statement each on PostgreSQL. Written at the
    batch's end, or before anything else touches one of their runs, since what it does then
    depends on what they wrote."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._endings: list[ending_store.Ending] = []
        self._successions: list[successor_store.Succession] = []
        self._runs: set[str] = set()

    def end(self, ending: ending_store.Ending) -> None:
        self._endings.append(ending)
        self._runs.add(ending.run.id)

    def escalate(self, succession: successor_store.Succession) -> None:
        self._successions.append(succession)
        self._runs.add(succession.old.run_id)

    def before(self, run_id: str) -> None:
        """About to decide on an interrupt of ``run_id``: what the batch holds of its run is
        written first."""
        if run_id in self._runs:
            self.write()

    def write(self) -> None:
        """Raises _Resolved when an escalated interrupt was no longer pending (the batch or
        its savepoint must not commit), as a run that moved raises from ``end_runs``."""
        endings, self._endings = self._endings, []
        successions, self._successions = self._successions, []
        self._runs.clear()
        ending_store.end_runs(self._session, endings, actor=SYSTEM_ACTOR)
        done = successor_store.supersede_all(self._session, successions, actor=SYSTEM_ACTOR)
        if len(done) != len(successions):
            raise _Resolved


class _HeldRoles:
    """The roles some active actor holds, read once by a batch that escalates, else never."""

    def __init__(self, session: Session) -> None:
        self._session = session
        self._roles: set[str] | None = None

    def none_of(self, roles: Collection[str]) -> bool:
        if self._roles is None:
            self._roles = interrupt_store.held_roles(self._session)
        return not self._roles & set(roles)


def _sweep_batch(now: datetime, size: int) -> _Batch:
    """One batch in one transaction. First without a savepoint per interrupt (two round trips
    each, most of a clean batch's time); if any interrupt does not apply cleanly (deferred,
    resolved meanwhile, failed), that attempt is rolled back whole and the batch applied again
    with each interrupt in a savepoint of its own, so that one bad row does not stop the rest.
    (Log lines of the rolled-back attempt are said again by the second.)"""
    try:
        return _sweep_batch_once(now, size, isolated=False)
    except _Isolate:
        return _sweep_batch_once(now, size, isolated=True)


def _sweep_batch_once(now: datetime, size: int, *, isolated: bool) -> _Batch:
    result = _Batch()
    with transaction() as session:
        due, unreadable = interrupt_store.due(session, now, size)
        result.selected = len(due) + len(unreadable)
        for interrupt_id, why in unreadable.items():
            log.error(
                "expiry of interrupt %s failed, it cannot be read; put off: %s",
                interrupt_id,
                why,
                extra={"action": "expiry_failed"},
            )
            interrupt_store.put_off(session, interrupt_id, now + PUT_OFF_AT_MOST)
            result.failed += 1
        runs, unreadable_runs = run_store.load_runs(
            session, {interrupt.run_id for interrupt in due}
        )
        held = _HeldRoles(session)
        together = _Together(session)
        for interrupt in due:
            # Read before anything can expire the row: the log lines below need them.
            interrupt_id, run_id, deadline = interrupt.id, interrupt.run_id, interrupt.deadline
            run = runs.get(run_id)
            if run_id in unreadable_runs:
                log.error(
                    "expiry of interrupt %s failed, its run cannot be read; put off: %s",
                    interrupt_id,
                    unreadable_runs[run_id],
                    extra={"action": "expiry_failed", "run_id": run_id},
                )
                interrupt_store.put_off(session, interrupt_id, now + PUT_OFF_AT_MOST)
                result.failed += 1
                continue
            if not isolated:
                try:
                    together.before(run_id)
                    done = _apply(session, interrupt, run, now, held, together, isolated=False)
                except Exception as exc:
                    raise _Isolate from exc
                _applied(result, done)
                continue
            try:
                with session.begin_nested():
                    alone = _Together(session)  # (written in its own savepoint)
                    done = _apply(session, interrupt, run, now, held, alone, isolated=True)
                    alone.write()
            except _Resolved:
                _forget(session, interrupt, run)
                log.info(
                    "expiry of interrupt %s skipped: it was resolved meanwhile",
                    interrupt_id,
                    extra={"action": "expiry_skipped", "run_id": run_id},
                )
            except _Deferred as deferred:
                _forget(session, interrupt, run)
                later = put_off_until(deadline, now)
                interrupt_store.put_off(session, interrupt_id, later)
                log.warning(
                    "expiry of interrupt %s deferred, it stays pending past its deadline "
                    "(looked at again at %s): %s",
                    interrupt_id,
                    later.isoformat(timespec="seconds"),
                    deferred,
                    extra={"action": "expiry_deferred", "run_id": run_id},
                )
                result.deferred += 1
            except Exception:
                _forget(session, interrupt, run)
                later = put_off_until(deadline, now)
                interrupt_store.put_off(session, interrupt_id, later)
                log.exception(
                    "expiry of interrupt %s failed; it stays pending (looked at again at %s)",
                    interrupt_id,
                    later.isoformat(timespec="seconds"),
                    extra={"action": "expiry_failed", "run_id": run_id},
                )
                result.failed += 1
            else:
                _applied(result, done)
        if not isolated:
            try:
                together.write()
            except Exception as exc:
                raise _Isolate from exc
    return result


def _applied(result: _Batch, done: AfterCommit | None) -> None:
    result.handled += 1
    if isinstance(done, tuple):
        result.publish.append(done)
    elif done is not None:
        result.notify.append(done)


def _forget(session: Session, *rows: Interrupt | Run | None) -> None:
    # Values set as committed (models.tables.committed) inside a rolled-back savepoint are not
    # undone by SQLAlchemy; reload these rows if anything in the batch looks at them again.
    for row in rows:
        if row is not None:
            session.expire(row)


def _apply(
    session: Session,
    interrupt: Interrupt,
    run: Run | None,
    now: datetime,
    held: _HeldRoles,
    together: _Together,
    *,
    isolated: bool,
) -> AfterCommit | None:
    """Apply ``interrupt``'s policy; returns what to do after commit, if anything. A run it
    ends and an interrupt it escalates are added to ``together``, written later.
    ``isolated``: in a savepoint of its own (else a failure rolls the whole batch back)."""
    if run is None or not _waits_on(run, interrupt):
        _close(session, interrupt)
        event_store.record_event(
            session,
            interrupt.run_id,
            actor=SYSTEM_ACTOR,
            kind=EventKind.INTERRUPT_EXPIRED,
            detail={
                **_detail(interrupt),
                "note": "the run was no longer waiting on it",
                "run_state": run.state if run is not None else None,
            },
        )
        _log(interrupt, "expire_orphan")
        return None
    policy = ExpiryPolicy(interrupt.on_expiry)
    if policy is ExpiryPolicy.ESCALATE:
        escalation = interrupt.escalation or {}
        if interrupt.escalation_level < int(escalation.get("max", 0)):
            return _escalate(together, interrupt, run, escalation, now, held)
        _end(together, interrupt, run, EventKind.EXPIRE, note="escalation limit reached")
        return None
    if policy is ExpiryPolicy.DEFAULT:
        return _default(session, interrupt, run, together, isolated=isolated)
    if policy is ExpiryPolicy.EXPIRE and interrupt.ask_group is not None:
        _expire_ask(session, interrupt, run, together)
        return None
    _end(
        together,
        interrupt,
        run,
        EventKind.CANCEL if policy is ExpiryPolicy.CANCEL else EventKind.EXPIRE,
    )
    return None


def _expire_ask(session: Session, interrupt: Interrupt, run: Run, together: _Together) -> None:
    """An ask of a group expires as not given: the run waits on while the group's need can
    still be met by the asks left open (``any``, k of n), and expires once it cannot (an
    ``all`` group at its first expired ask)."""
    # Counted with the run locked, as the gateway counts answers (interrupt, then run).
    run_store.lock_run(session, run.id)
    answered, still_open = interrupt_store.group_counts(session, interrupt)
    need = int(interrupt.group_need or 1)
    if answered + still_open < need:
        _end(
            together,
            interrupt,
            run,
            EventKind.EXPIRE,
            note=f"group {interrupt.ask_group!r} can no longer have {need} answers",
        )
        return
    _close(session, interrupt)
    event_store.record_event(
        session,
        run.id,
        actor=SYSTEM_ACTOR,
        kind=EventKind.INTERRUPT_EXPIRED,
        detail={
            **_detail(interrupt),
            "group": interrupt.ask_group,
            "note": "counts as not given; the group can still be met",
        },
    )
    _log(interrupt, "expire_ask")


def _waits_on(run: Run, interrupt: Interrupt) -> bool:
    """The run still waits at the point where ``interrupt`` was raised."""
    return run.state == RunState.WAITING.value and run.state_version == interrupt.state_version


def _close(session: Session, interrupt: Interrupt) -> None:
    """``pending → expired``, conditionally: a row handled meanwhile is not handled twice."""
    if not interrupt_store.transition(session, interrupt, "expire", resolved_by=SYSTEM_ACTOR):
        raise _Resolved


def _end(
    together: _Together,
    interrupt: Interrupt,
    run: Run,
    trigger: EventKind,
    *,
    note: str | None = None,
) -> None:
    """The wait is over for good: the interrupt expires, the run expires or is cancelled.

    Written with the batch's other ends (``_Together``): the interrupt's expiry rides on the
    run's move, written only if the run moved (as a step's commit carries its rows). It cannot
    miss once the run moved: the batch holds the interrupt's row (``interrupt_store.due`` locks
    it on PostgreSQL; SQLite has one writer), and whatever else closes a pending interrupt
    moves its run, or, for an ask of a group, locks the run first as ``_expire_ask`` does."""
    detail = _detail(interrupt)
    if note is not None:
        detail["note"] = note
    error = f"interrupt {interrupt.name!r} passed its deadline ({note or interrupt.on_expiry})"
    together.end(ending_store.Ending(run, interrupt, trigger, detail, error))
    _log(interrupt, trigger)


def _escalate(
    together: _Together,
    interrupt: Interrupt,
    run: Run,
    escalation: dict[str, Any],
    now: datetime,
    held: _HeldRoles,
) -> AfterCommit:
    """A new pending interrupt for the escalation roles supersedes the old one; the run's
    event goes with them, written with the batch's other escalations (``_Together``)."""
    renewed = interrupt_store.successor(
        interrupt,
        roles=list(escalation["roles"]),
        deadline=now + timedelta(seconds=float(escalation["expires_in"])),
        escalation_level=interrupt.escalation_level + 1,
    )
    detail = {
        **_detail(interrupt),
        "new_interrupt_id": renewed.id,
        "level": renewed.escalation_level,
        "roles": renewed.roles,
        "new_deadline": renewed.deadline.isoformat(),
    }
    # Not refused: a role may be granted before the new deadline. Until then nobody can answer.
    unheld = held.none_of(renewed.roles)
    if unheld:
        detail["note"] = UNHELD
    together.escalate(successor_store.Succession(interrupt, renewed, detail))
    if unheld:
        log.warning(
            "interrupt %s escalated to roles %s (as interrupt %s): %s",
            interrupt.id,
            ", ".join(renewed.roles),
            renewed.id,
            UNHELD,
            extra={"action": "escalate_unheld", "run_id": run.id},
        )
    _log(interrupt, "escalate")
    return _notifying(run, renewed)


def _notifying(run: Run, interrupt: Interrupt) -> AfterCommit:
    """After commit: the run's flow's notifiers hear about ``interrupt``, if the flow is here."""
    flow_name, flow_version, run_id = run.flow_name, run.flow_version, run.id

    def tell_notifiers() -> bool:
        try:
            flow = get_flow(flow_name, flow_version, run_id=run_id)
        except InterludeError as exc:
            log.warning(
                "escalated interrupt %s not notified: %s",
                interrupt.id,
                exc,
                extra={"action": "notify", "run_id": run_id},
            )
            return False
        notify(flow, interrupt)
        return True

    return tell_notifiers


def _default(
    session: Session, interrupt: Interrupt, run: Run, together: _Together, *, isolated: bool
) -> AfterCommit | None:
    """Resume with the declared default input, through the gateway's own acceptance path.
    Outside a savepoint of its own, a lost race raises: the batch is applied again, isolated."""
    try:
        done = resume_as_system(
            session,
            interrupt,
            actor_id=SYSTEM_ACTOR,
            input=interrupt.default_input or {},
            reason="default input refused",
            isolated=isolated,
        )
    except SystemDeferred as deferred:
        # Fail closed: an approval this process cannot check waits for one that can.
        raise _Deferred(str(deferred)) from None
    result = done.result
    if done.renewed is not None:
        # The evidence changed: the renewed review waits for people, with its own deadline.
        _log(interrupt, "review_renewed")
        flow, renewed = done.renewed

        def tell_notifiers() -> bool:
            notify(flow, renewed)
            return True

        return tell_notifiers
    if not result.accepted:
        # The refusal is recorded; the wait still has to end, so the run expires.
        _end(together, interrupt, run, EventKind.EXPIRE, note=result.reason)
        return None
    _log(interrupt, "default")
    if not done.released:
        # One ask of a group answered by its default; the run waits on the rest.
        return None
    return (run.id, True, run.flow_name, run.next_step)


def _detail(interrupt: Interrupt) -> dict[str, Any]:
    return {
        "interrupt_id": interrupt.id,
        "name": interrupt.name,
        "policy": interrupt.on_expiry,
        "deadline": interrupt.deadline.isoformat(),
    }


def _log(interrupt: Interrupt, action: str) -> None:
    log.info(
        "interrupt %s (%s) past its deadline: %s",
        interrupt.id,
        interrupt.name,
        action,
        extra={"action": f"expiry_{action}", "run_id": interrupt.run_id},
    )
