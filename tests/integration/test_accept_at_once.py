"""An answer accepted at once (``worker.gateway.at_once``): decided on a read without locks,
written by one statement guarded on what the decision read. Whatever changed in between (the
actor revoked, its roles, credential or kind, the interrupt no longer pending) makes that
statement write nothing, and the gateway's transaction then decides and records the answer.
The guard runs on SQLite and PostgreSQL alike; the race with a revoke still in progress is
PostgreSQL's (row locks)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from sqlalchemy import func, select, update

from models import attempts as attempt_store
from models import interrupts as interrupt_store
from models.contracts import ResumeContract
from models.db import get_engine, transaction, utcnow
from models.tables import Actor, Interrupt, ResumeAttempt, Run
from tests.resumes import Waiting, approval_waiting_on_alice, contract_for
from worker import (
    get_run,
    revoke_actor,
    set_actor_kind,
    set_actor_roles,
    submit_resume,
)
from worker.gateway import attempt_records as attempts
from worker.gateway.acceptance import LostRace, release
from worker.gateway.actors import Credential, rotate_actor
from worker.gateway.checks import checked_answer
from worker.testing import TaskRecorder


@pytest.fixture()
def waiting(db: str, tasks: TaskRecorder) -> Waiting:
    return approval_waiting_on_alice()


@dataclass
class Decided:
    """An answer of alice's decided on a read, not yet written."""

    contract: ResumeContract
    attempt: attempts.Attempt
    actor: Actor
    interrupt: Interrupt
    run: Run
    submitted: dict[str, object]

    def write(self) -> None:
        """The answer's one guarded statement, as ``accept_at_once`` sends it."""
        with transaction(autocommit=True) as scope:
            release(
                scope,
                self.contract,
                self.submitted,
                self.attempt,
                self.interrupt,
                self.run,
                True,
                given=attempt_store.answerable_write(self.interrupt, self.actor),
            )


def _decided(waiting: Waiting) -> Decided:
    contract = ResumeContract.model_validate(contract_for(waiting.interrupt, "alice"))
    with transaction(readonly=True) as session:
        found = attempt_store.answer_context(
            session, "alice", contract.idempotency_key, contract.interrupt_id
        )
    assert found is not None
    actor, key_used, interrupt, run = found
    assert not key_used and actor.id == "alice" and run.id == waiting.run_id
    submitted, _ = checked_answer(contract, actor, interrupt, run)
    attempt = attempts.Attempt(None, Credential(waiting.credential))
    attempt.actor_id = actor.id
    attempt.payload = contract.model_dump(mode="json")
    attempt.key = contract.idempotency_key
    return Decided(contract, attempt, actor, interrupt, run, submitted)


def _attempts_of_alice() -> int:
    with transaction(readonly=True) as session:
        return int(
            session.scalar(
                select(func.count())
                .select_from(ResumeAttempt)
                .where(ResumeAttempt.actor_id == "alice")
            )
            or 0
        )


def _cancel_interrupt(waiting: Waiting) -> None:
    """The interrupt stops being pending while its run stays where it is (no version move)."""
    with transaction() as session:
        closed = interrupt_store.close_pending(
            session, waiting.run_id, "cancel", resolved_by="operator"
        )
    assert closed == [waiting.interrupt.id]


CHANGES: dict[str, tuple[Callable[[Waiting], object], str]] = {
    "revoked": (lambda w: revoke_actor("alice"), "unauthenticated"),
    "credential rotated": (lambda w: rotate_actor("alice"), "unauthenticated"),
    "roles changed": (lambda w: set_actor_roles("alice", ["auditor"]), "denied"),
    "kind changed": (lambda w: set_actor_kind("alice", "service"), "unauthenticated"),
    "interrupt closed": (_cancel_interrupt, "stale"),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_what_changed_after_the_read_stops_the_write(waiting: Waiting, change: str) -> None:
    # Given alice's answer decided on a read
    decided = _decided(waiting)
    version = get_run(waiting.run_id).state_version
    # When the actor or the interrupt changes before the answer's statement runs
    make, refusal = CHANGES[change]
    make(waiting)
    # Then the statement writes nothing: the run waits at its version, no attempt of hers
    with pytest.raises(LostRace):
        decided.write()
    run = get_run(waiting.run_id)
    assert (run.state, run.state_version) == ("waiting", version)
    assert _attempts_of_alice() == 0
    # ...and the gateway's transaction decides the same answer on what is there now
    result = submit_resume(contract_for(waiting.interrupt, "alice"), waiting.credential)
    assert (result.accepted, result.outcome.value) == (False, refusal), result.reason
    assert get_run(waiting.run_id).state_version == version


def test_unchanged_the_write_accepts(waiting: Waiting) -> None:
    # Given alice's answer decided on a read, with nothing changed since
    decided = _decided(waiting)
    # When its statement runs, Then it moves the run and resolves the interrupt
    decided.write()
    assert get_run(waiting.run_id).state == "resuming"
    with transaction(readonly=True) as session:
        interrupt = session.get(Interrupt, waiting.interrupt.id)
        assert interrupt is not None
        assert (interrupt.status, interrupt.resolved_by) == ("resolved", "alice")
    assert _attempts_of_alice() == 1


def test_a_revoke_in_progress_is_waited_for_and_then_stops_the_write(
    waiting: Waiting, backend: str, database_url: str
) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite serialises every writer; row locks are PostgreSQL's")
    decided = _decided(waiting)
    outcome: list[BaseException | None] = []

    def answer() -> None:
        try:
            decided.write()
            outcome.append(None)
        except BaseException as exc:  # (reported by the test's thread below)
            outcome.append(exc)

    # Given a revoke of alice that has changed her row and not committed yet
    with get_engine(database_url).connect() as other:
        other.execute(update(Actor).where(Actor.id == "alice").values(revoked_at=utcnow()))
        # When the answer's statement runs, it waits for the revoke's row lock
        writer = threading.Thread(target=answer)
        writer.start()
        writer.join(0.5)
        assert writer.is_alive(), f"the answer did not wait for the revoke: {outcome}"
        other.commit()
    writer.join(10)
    # Then, the revoke committed first, the answer wrote nothing
    assert len(outcome) == 1 and isinstance(outcome[0], LostRace), outcome
    assert get_run(waiting.run_id).state == "waiting"
    assert _attempts_of_alice() == 0
