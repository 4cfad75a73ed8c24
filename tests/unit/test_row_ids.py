"""Row ids: UUID version 7, ordered by the millisecond they were made in."""

from __future__ import annotations

import time
import uuid

from models.storable import new_id


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


def test_ids_made_later_sort_later() -> None:
    # Later ids land at one edge of an index: the reason ids are time-ordered at all.
    made_in_turn = []
    for _ in range(5):
        made_in_turn.append(new_id())
        time.sleep(0.002)
    assert made_in_turn == sorted(made_in_turn)


def test_ids_differ_in_74_random_bits_and_keep_version_and_variant() -> None:
    made = {new_id() for _ in range(10_000)}
    assert len(made) == 10_000
    # Every bit outside the time, the version and the variant moves; none of those does.
    ors = ands = int(next(iter(made)), 16)
    for one in made:
        ors, ands = ors | int(one, 16), ands & int(one, 16)
    random_mask = ((1 << 12) - 1) << 64 | ((1 << 62) - 1)
    assert ors & random_mask == random_mask
    assert ands & random_mask == 0
    fixed = ~random_mask & ((1 << 80) - 1)  # the version's and the variant's bits
    assert {int(one, 16) & fixed for one in made} == {7 << 76 | 2 << 62}
