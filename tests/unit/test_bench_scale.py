"""bench.scale's spread of deadlines: exactly the due interrupts are due, for as long as the
bench runs, and every interrupt was asked in the past."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from types import SimpleNamespace
from typing import Any

import pytest

from bench.scale import MICROSECOND, Spread, percentile, placements
from models.db import EPOCH
from models.storable import CLOCK_WRAP

NOW = datetime(2026, 12, 5, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)
LASTS = [7 * DAY, 10 * DAY, 14 * DAY, 30 * DAY]


def test_exactly_the_due_ones_are_due_until_the_first_other_falls_due() -> None:
    # Given 10,000 runs of which 1,000 due, spread over asks of four durations
    spread = Spread(total=10_000, due=1_000, now=NOW)
    deadlines = [spread.deadline(n, LASTS[n % 4]) for n in range(spread.total)]
    # Then 1,000 are due now, and still 1,000 a day later (the shortest ask lasts a week and
    # the others were asked within the last six days)
    assert sum(d <= NOW for d in deadlines) == 1_000
    assert sum(d <= NOW + DAY - timedelta(minutes=1) for d in deadlines) == 1_000
    # And every one was asked in the past, the due ones within an hour of their deadline
    assert all(spread.asked_at(n, LASTS[n % 4]) < NOW for n in range(spread.total))
    assert all(NOW - timedelta(hours=1) <= d for d in deadlines[:1_000])


def test_the_others_were_asked_oldest_first_over_the_window() -> None:
    spread = Spread(total=1_000, due=10, now=NOW)
    asked = [spread.asked_at(n, 7 * DAY) for n in range(10, 1_000)]
    assert asked == sorted(asked)
    assert NOW - spread.window <= asked[0] < asked[-1] < NOW


@pytest.mark.parametrize("due", [-1, 100])
def test_a_spread_must_leave_some_runs_not_due(due: int) -> None:
    with pytest.raises(ValueError, match="due must be 0 to 99"):
        Spread(total=100, due=due, now=NOW)


def test_an_ask_shorter_than_the_window_is_refused() -> None:
    with pytest.raises(ValueError, match="would fall due inside"):
        Spread(total=100, due=1, now=NOW).asked_at(50, DAY)


def test_percentile_is_nearest_rank() -> None:
    values = [float(v) for v in range(1, 21)]
    assert percentile(values, 0.5) == 10.0
    assert percentile(values, 0.99) == 20.0
    assert percentile([3.0], 0.99) == 3.0


def test_the_bulks_ids_are_made_when_their_runs_asked_so_they_cover_every_prefix() -> None:
    # Given a template of three rows asked ten days before NOW, copied 4,096 times over the
    # six days' window (the clock in an id wraps every 71.6 minutes)
    template: Any = SimpleNamespace(lasts=7 * DAY, asked=NOW - 10 * DAY, ids=["r", "c", "i"])
    (place,) = placements(Spread(total=4_096, due=10, now=NOW), [template], 0, 4_096)
    runs, later = place.ids[0], place.ids[1:]
    # Then the runs' ids spread over every prefix, as runs made over days do
    assert {one[:2] for one in runs} == {f"{n:02x}" for n in range(256)}
    # And each copy's rows were made a millisecond apart, at the moment the copy asked
    for n, run in enumerate(runs):
        asked = (NOW - 10 * DAY - EPOCH) // MICROSECOND + place.shift[n]
        assert int(run[:8], 16) == asked % CLOCK_WRAP
        for k, column in enumerate(later, start=1):
            assert int(column[n][:8], 16) == (asked + 1000 * k) % CLOCK_WRAP


def test_the_due_runs_copy_one_template_when_a_policy_is_asked_for() -> None:
    # Given four templates and a spread whose due runs copy the last one (--due-policy)
    tpls = _four_templates()
    spread = Spread(total=100, due=10, now=NOW, due_template=3)
    places = placements(spread, tpls, 0, 100)
    # Then runs 0 to 9 (the due ones) all copy it, and the others still take turns
    assert places[3].n[:10] == list(range(10))
    assert [n for place in places[:3] for n in place.n if n < 10] == []
    assert sorted(n for place in places for n in place.n) == list(range(100))
    assert places[0].n == [n for n in range(10, 100) if n % 4 == 0]


def test_grouped_runs_copy_each_template_in_a_block_the_first_template_s_the_youngest() -> None:
    # Given four templates and a grouped spread of 90 runs not due after 10 due ones
    tpls = _four_templates()
    spread = Spread(total=100, due=10, now=NOW, grouped=True)
    places = placements(spread, tpls, 0, 100)
    # Then the due ones take turns among the other templates, and the others copy one
    # template per block, the last template's first (oldest) and the first template's last
    assert [n for n in places[1].n if n < 10] == [0, 3, 6, 9]
    assert [n for n in places[0].n if n < 10] == []
    not_due = [[n for n in place.n if n >= 10] for place in places]
    assert not_due[3] == list(range(10, 33)) and not_due[0] == list(range(78, 100))
    assert sorted(n for place in places for n in place.n) == list(range(100))
    assert max(not_due[0]) == 99 and min(not_due[0]) > max(not_due[1])


def _four_templates() -> list[Any]:
    """Templates as ``placements`` reads them, one per ask duration of LASTS."""
    return [SimpleNamespace(lasts=lasts, asked=NOW - 40 * DAY, ids=["r"]) for lasts in LASTS]
