"""Row ids: random, so that their first characters name a row."""

from __future__ import annotations

import uuid

from models.storable import new_id


def test_an_id_is_32_hex_digits() -> None:
    for made in [new_id() for _ in range(200)]:
        assert uuid.UUID(made).hex == made


def test_ids_made_at_once_differ_in_their_first_8_characters() -> None:
    # Tables show ids by their first 8 characters and commands take prefixes of 6 or more:
    # ids that shared a prefix when made together (time-ordered ones) would name several rows.
    made = [new_id() for _ in range(200)]
    assert len({one[:8] for one in made}) == len(made)
