"""Every resume outcome has an HTTP status and words for people."""

from __future__ import annotations

from models.enums import ResumeOutcome
from worker.web.outcomes import HEADLINE, STATUS


def test_every_outcome_has_a_status_and_a_headline() -> None:
    assert set(STATUS) == set(ResumeOutcome)
    assert set(HEADLINE) == set(ResumeOutcome)


def test_only_acceptance_duplicates_and_kept_events_are_successes() -> None:
    successes = {outcome for outcome, status in STATUS.items() if status < 300}
    # (kept: an event received for a run that does not wait on it yet)
    assert successes == {ResumeOutcome.ACCEPTED, ResumeOutcome.DUPLICATE, ResumeOutcome.KEPT}
