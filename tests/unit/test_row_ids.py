"""Row ids: the clock first, so that rows made together sit together in an index, and fine
enough that their first characters still name one row."""

from __future__ import annotations

import itertools
import time
import uuid

from models.storable import CLOCK_WRAP, id_at, new_id


def test_an_id_is_a_uuid_of_version_8_in_32_hex_digits() -> None:
    for made in [new_id() for _ in range(200)]:
        assert uuid.UUID(made).hex == made
        assert uuid.UUID(made).version == 8
        assert uuid.UUID(made).variant == uuid.RFC_4122


def test_ids_made_at_once_differ_in_their_first_8_characters_and_sort_as_made() -> None:
    # Tables show ids by their first 8 characters and commands take prefixes of 6 or more:
    # ids that shared a prefix when made together would name several rows. In the order
    # made, they are in the order an index keeps them (but where the clock wraps).
    made = [new_id() for _ in range(2000)]
    assert len({one[:8] for one in made}) == len(made)
    turns = sum(1 for a, b in itertools.pairwise(made) if b < a)
    assert turns <= 1


def test_ids_made_a_quarter_millisecond_apart_differ_in_their_first_6() -> None:
    first = new_id()
    time.sleep(0.0003)
    assert new_id()[:6] != first[:6]


def test_the_clock_wraps_and_the_rest_is_random() -> None:
    moment = 1_765_000_000_123_456
    a, b = id_at(moment), id_at(moment + CLOCK_WRAP)
    assert a[:8] == b[:8] == f"{moment % CLOCK_WRAP:08x}"
    assert a[8:] != b[8:]
    assert len({id_at(moment)[8:] for _ in range(1000)}) == 1000
