"""Row ids: UUID version 7, ordered by the millisecond they were made in."""

from __future__ import annotations

import time
import uuid

from models.storable import id_at, new_id


def test_an_id_is_32_hex_digits_of_a_version_7_uuid() -> None:
    for made in [new_id() for _ in range(200)]:
        parsed = uuid.UUID(made)
        assert parsed.hex == made
        assert parsed.version == 7
        assert parsed.variant == uuid.RFC_4122


def test_an_id_begins_with_the_millisecond_it_was_made_in() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert before <= int(made[:12], 16) <= after
    assert int(id_at(1_700_000_000_123)[:12], 16) == 1_700_000_000_123


def test_ids_made_later_sort_later_and_ids_of_one_millisecond_differ() -> None:
    # Later ids land at one edge of an index: the reason ids are time-ordered at all.
    times = [1_700_000_000_000 + step for step in (0, 1, 2, 1_000, 86_400_000)]
    made_in_turn = [id_at(ms) for ms in times]
    assert made_in_turn == sorted(made_in_turn)
    same = {id_at(1_700_000_000_000) for _ in range(10_000)}
    assert len(same) == 10_000
    # All 74 random bits move: no bit outside the time, version and variant is fixed.
    ors = ands = int(next(iter(same)), 16)
    for made in same:
        ors, ands = ors | int(made, 16), ands & int(made, 16)
    random_mask = ((1 << 12) - 1) << 64 | ((1 << 62) - 1)
    assert ors & random_mask == random_mask
    assert ands & random_mask == 0
