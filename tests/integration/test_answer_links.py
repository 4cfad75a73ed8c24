"""Answer links: signed, single-use, expiring, bound, and through the gateway — both databases.

Each way a link must not work is a test: by anyone but its responder, for another interrupt,
checkpoint or decision, after it expires, after its actor is revoked (or rotated), after it
is revoked, twice; each refusal is recorded (``via link:<id>``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from sqlalchemy import select

from models.db import transaction
from models.errors import LinkError
from models.settings import reset_settings
from models.tables import AnswerLink, ResumeAttempt
from tests.flows.interrupts import scratch_redis
from tests.resumes import (
    Waiting,
    approval_waiting_on_alice,
    contract_for,
    drain_finished,
    drain_pending,
    snapshot,
)
from worker import add_actor, enqueue_run, get_interrupt, get_run, revoke_actor, rotate_actor
from worker.gateway.answer_links import (
    LinkProof,
    answer_with_link,
    issue_links,
    key_of,
    link_page,
    revoke_links,
    signed_link_id,
)
from worker.gateway.submit import submit_proven
from worker.testing import TaskRecorder

SECRET = "s" * 40
pytestmark = pytest.mark.usefixtures("scratch")


@pytest.fixture()
def link_secret(monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    monkeypatch.setenv("INTERLUDE_LINK_SECRET", SECRET)
    reset_settings()
    yield SECRET
    monkeypatch.undo()
    reset_settings()


@pytest.fixture()
def waiting(db: str, tasks: TaskRecorder, link_secret: str) -> Waiting:
    """An approval waiting on alice (approver); bob is an approver too."""
    return approval_waiting_on_alice("bob")


def _attempts(interrupt_id: str | None = None) -> list[ResumeAttempt]:
    with transaction(readonly=True) as session:
        query = select(ResumeAttempt).order_by(ResumeAttempt.id)
        if interrupt_id is not None:
            query = query.where(ResumeAttempt.interrupt_id == interrupt_id)
        return list(session.execute(query).scalars())


def test_a_link_answers_once_as_its_responder_and_the_run_continues(waiting: Waiting) -> None:
    # Given alice's link to approve
    (link,) = issue_links(waiting.interrupt.id, ["alice"], decisions=["approved"])
    # When it is opened (a mail scanner, a preview, alice herself)
    before = snapshot(waiting.run_id)
    page = link_page(link.token)
    # Then it shows the interrupt and what the link may do, and changes nothing
    assert page is not None and page.problem is None
    assert (page.interrupt.id, page.actor_id, page.decisions) == (
        waiting.interrupt.id,
        "alice",
        ("approved",),
    )
    assert snapshot(waiting.run_id) == before and _attempts() == []
    # When she confirms
    result = answer_with_link(link.token, "approved")
    # Then it is accepted as hers, recorded as answered through the link, and the run goes on
    assert result.outcome == "accepted", result.reason
    assert drain_finished(waiting.run_id) == "succeeded"
    assert get_run(waiting.run_id).flow_state["approved_by"] == "alice"
    (attempt,) = _attempts()
    assert (attempt.actor_id, attempt.via) == ("alice", f"link:{link.link_id}")
    assert attempt.idempotency_key == key_of(link.link_id)
    # And the link now says it was used
    used = link_page(link.token)
    assert used is not None and used.problem == "This link was used already (accepted)."


def test_a_link_used_twice_is_a_duplicate_whatever_it_submits(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    assert answer_with_link(link.token, "approved").accepted
    # When it is used again, even with the other decision it allows
    again = answer_with_link(link.token, "rejected")
    # Then it is a duplicate of the first use, recorded, and nothing happens twice
    assert again.outcome == "duplicate"
    assert again.original_outcome == "accepted"
    assert [a.outcome for a in _attempts()] == ["accepted", "duplicate"]
    assert drain_finished(waiting.run_id) == "succeeded"
    assert get_run(waiting.run_id).flow_state["decision"] == "approved"


def _proven(waiting: Waiting, link_token: str, link_id: str, **overrides: object) -> object:
    contract = contract_for(waiting.interrupt, "alice", key=key_of(link_id), **overrides)
    return submit_proven(contract, LinkProof(link_id, link_token), secret=link_token)


def test_a_link_answers_for_nobody_but_its_responder(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    before = snapshot(waiting.run_id)
    # When its token is used to answer as bob (who may answer too)
    result = _proven(waiting, link.token, link.link_id, actor={"type": "human", "id": "bob"})
    # Then it is refused as unauthenticated, recorded, and nothing moved
    assert result.outcome == "unauthenticated"  # type: ignore[attr-defined]
    assert "answers as alice only" in result.reason  # type: ignore[attr-defined]
    assert snapshot(waiting.run_id) == before
    (attempt,) = _attempts()
    assert (attempt.outcome, attempt.via) == ("unauthenticated", f"link:{link.link_id}")
    # And the link still works for alice
    assert answer_with_link(link.token, "approved").accepted


def test_a_link_answers_no_other_interrupt(waiting: Waiting) -> None:
    other_run = enqueue_run("approval", {"env": "prod", "diff": "d-2"})
    other = drain_pending(other_run)
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    contract = contract_for(other, "alice", key=key_of(link.link_id))
    result = submit_proven(contract, LinkProof(link.link_id, link.token), secret=link.token)
    assert result.outcome == "denied"
    assert "interrupt is not the link's" in result.reason
    assert get_interrupt(other.id).status == "pending"
    assert [a.outcome for a in _attempts(other.id)] == ["denied"]


def test_a_link_answers_at_no_other_checkpoint(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    result = _proven(waiting, link.token, link.link_id, checkpoint_id="c" * 32)
    assert result.outcome == "denied"  # type: ignore[attr-defined]
    assert "checkpoint is not the link's" in result.reason  # type: ignore[attr-defined]
    # Nor with another key than its own (a second decision by the back door)
    other_key = _proven(waiting, link.token, link.link_id, idempotency_key="mine-1")
    assert other_key.outcome == "denied"  # type: ignore[attr-defined]
    assert [a.outcome for a in _attempts()] == ["denied", "denied"]
    assert get_interrupt(waiting.interrupt.id).status == "pending"


def test_a_link_makes_no_other_decision(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"], decisions=["approved"])
    result = answer_with_link(link.token, "rejected")
    assert result.outcome == "denied"
    assert "decision rejected is not one of approved" in result.reason
    assert get_interrupt(waiting.interrupt.id).status == "pending"
    # A refusal claims nothing: the link still approves, once
    assert answer_with_link(link.token, "approved").accepted


def test_a_link_expires(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"], expires_in=0.3)
    time.sleep(0.5)
    result = answer_with_link(link.token, "approved")
    assert result.outcome == "expired"
    assert f"link {link.link_id} expired at" in result.reason
    assert get_interrupt(waiting.interrupt.id).status == "pending"
    page = link_page(link.token)
    assert page is not None and page.problem == "This link has expired."


def test_revoking_or_rotating_the_actor_ends_its_links(waiting: Waiting) -> None:
    first, second = (issue_links(waiting.interrupt.id, ["alice"])[0] for _ in range(2))
    # When alice is revoked
    revoke_actor("alice")
    refused = answer_with_link(first.token, "approved")
    assert refused.outcome == "unauthenticated", refused.reason
    # And when she is given a new credential (which makes her active again)
    rotate_actor("alice")
    still = answer_with_link(second.token, "approved")
    # Then links issued before stay dead
    assert still.outcome == "unauthenticated"
    assert "given a new credential" in still.reason
    assert get_interrupt(waiting.interrupt.id).status == "pending"
    assert [a.outcome for a in _attempts()] == ["unauthenticated", "unauthenticated"]


def test_a_revoked_link_is_refused_naming_who_revoked_it(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    assert revoke_links(link_id=link.link_id, by="ops:kim") == [link.link_id]
    result = answer_with_link(link.token, "approved")
    assert result.outcome == "unauthenticated"
    assert "revoked" in result.reason and "ops:kim" in result.reason
    assert revoke_links(actor_id="alice", by="ops:kim") == []  # nothing active is left


def test_a_link_to_a_superseded_interrupt_is_stale_and_says_where_the_new_one_is(
    db: str, tasks: TaskRecorder, link_secret: str
) -> None:
    # Given a price approval and alice's link to it
    credential = add_actor("alice", ["approver"])
    redis = scratch_redis()
    redis.set("price:sku-l", "10")
    run_id = enqueue_run("priced", {"sku": "sku-l"})
    old = drain_pending(run_id)
    (link,) = issue_links(old.id, ["alice"])
    # When the price changed and an answer from the inbox renewed the review
    redis.set("price:sku-l", "12")
    from worker import submit_resume

    renewed = submit_resume(contract_for(old, "alice"), credential)
    assert renewed.outcome == "renewed_review_required"
    # Then the link is stale, and its interrupt names the one that replaced it
    result = answer_with_link(link.token, "approved")
    assert result.outcome == "stale"
    assert "interrupt is superseded" in result.reason
    assert get_interrupt(old.id).superseded_by == renewed.new_interrupt_id


def test_a_token_nobody_signed_is_refused_and_recorded(waiting: Waiting) -> None:
    (link,) = issue_links(waiting.interrupt.id, ["alice"])
    altered = link.token[:-2] + ("AA" if not link.token.endswith("AA") else "BB")
    assert signed_link_id(altered) is None and link_page(altered) is None
    result = answer_with_link(altered, "approved")
    assert result.outcome == "unauthenticated"
    (attempt,) = _attempts()
    assert attempt.actor_id is None and attempt.interrupt_id is None
    assert altered not in str(attempt.payload)


def test_tokens_are_kept_only_as_hashes_and_never_in_records(waiting: Waiting) -> None:
    links = issue_links(waiting.interrupt.id, ["alice", "bob"])
    assert "token=" not in repr(links[0])
    answer_with_link(links[1].token, "rejected")
    answer_with_link(links[0].token, "approved")
    with transaction(readonly=True) as session:
        stored = list(session.execute(select(AnswerLink)).scalars())
    assert {row.id for row in stored} == {link.link_id for link in links}
    for row, link in zip(
        sorted(stored, key=lambda r: r.id), sorted(links, key=lambda x: x.link_id), strict=True
    ):
        assert row.token_hash.startswith("sha256$") and link.token not in row.token_hash
    for attempt in _attempts():
        text = f"{attempt.payload} {attempt.reason} {attempt.idempotency_key}"
        assert all(link.token not in text for link in links)


def test_links_need_the_secret_and_a_pending_interrupt(
    waiting: Waiting, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert answer_with_link(
        issue_links(waiting.interrupt.id, ["alice"])[0].token, "approved"
    ).accepted
    drain_finished(waiting.run_id)
    with pytest.raises(LinkError, match="is resolved, not pending"):
        issue_links(waiting.interrupt.id, ["alice"])
    monkeypatch.delenv("INTERLUDE_LINK_SECRET")
    reset_settings()
    with pytest.raises(LinkError, match="INTERLUDE_LINK_SECRET is not set"):
        issue_links(waiting.interrupt.id, ["alice"])
