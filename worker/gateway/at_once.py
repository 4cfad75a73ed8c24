"""The usual answer, accepted in two statements without a transaction (PostgreSQL).

Most resumes are the plain case: a known actor with the right credential and roles answers a
pending interrupt, with a key it has not used, and nothing is left to revalidate here. The
gateway's transaction decides that with the actor and the interrupt locked from its first
read to its commit: four round trips (``BEGIN``, two reads, the acceptance) and the
``COMMIT``, and an ORM session. Here the same checks run on one read without a lock, and the
acceptance (the run's move, its event, the interrupt resolved, the attempt) is one statement
guarded on what they decided on (``models.attempts.answerable_write``): it locks the
interrupt if still pending and the actor if still as authenticated, as the transaction holds
them, so a revoke or a second answer is ordered before it (and then it writes nothing) or
after it, as before. The run's move is its compare-and-set on the version read.

Whatever is not that case, or loses a race, returns None before writing anything, and the
gateway decides it the long way (``worker.gateway.submit``): every refusal, repeat, proof,
group, renewal and revalidation is decided and recorded there, exactly as before. A refused
answer therefore costs one read more than it did; an accepted one, three round trips fewer.
"""

from __future__ import annotations

from dataclasses import dataclass

from models import attempts as attempt_store
from models.contracts import ResumeContract
from models.db import autocommits_without_session, transaction
from models.errors import RunNotFoundError
from models.identity import normal_actor_id
from models.scope import AutocommitScope
from models.tables import Interrupt, Run
from worker.gateway import attempt_records as attempts
from worker.gateway.acceptance import Accepted, LostRace, release
from worker.gateway.actors import verified
from worker.gateway.checks import Refusal, checked_answer, revalidates


@dataclass(frozen=True)
class AcceptedAtOnce:
    """An answer accepted at once: the run it released and the interrupt it resolved."""

    accepted: Accepted
    interrupt: Interrupt
    run: Run


def accept_at_once(contract: ResumeContract, attempt: attempts.Attempt) -> AcceptedAtOnce | None:
    """``contract`` accepted in one read and one guarded write, or None, with nothing written,
    when it is not the plain case or lost a race (the caller then decides it in a transaction)."""
    if attempt.proof is not None or not autocommits_without_session():
        return None
    with transaction(autocommit=True) as scope:
        assert isinstance(scope, AutocommitScope)
        found = attempt_store.answer_context(
            scope,
            normal_actor_id(contract.actor.id),
            contract.idempotency_key,
            contract.interrupt_id,
        )
        if found is None:
            # An unknown actor costs what a wrong credential costs here too (``verified``).
            verified(None, attempt.credential)
            return None
        row, key_used, interrupt, run = found
        actor = verified(row, attempt.credential)
        if (
            actor is None
            or actor.kind != contract.actor.type
            or key_used
            or interrupt.ask_group is not None
        ):
            return None
        try:
            submitted, code = checked_answer(contract, actor, interrupt, run)
        except Refusal:
            return None
        if code is not None and revalidates(code[0], interrupt):
            return None
        spelled, attempt.actor_id = attempt.actor_id, actor.id
        # Its own transaction, with no rollback to fall back on: the guard locks the
        # interrupt as pending before the run moves, so the resolution riding along matches
        # and the statement writes all of it or nothing.
        try:
            accepted = release(
                scope,
                contract,
                submitted,
                attempt,
                interrupt,
                run,
                revalidated=code is not None,
                given=attempt_store.answerable_write(interrupt, actor),
            )
        except (LostRace, Refusal, RunNotFoundError):
            # Nothing was written (one statement): the transaction decides and records it.
            attempt.actor_id = spelled
            return None
    return AcceptedAtOnce(accepted, interrupt, run)
