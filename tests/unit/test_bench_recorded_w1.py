"""bench.recorded_w1: W1's recorded statements, each measured run with values of its own."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from psycopg.types.json import Jsonb

from bench.recorded_w1 import (
    PHASES,
    JsonValue,
    Recorded,
    own_token,
    plans,
    run_scoped,
    tokens_in,
    values_for,
)

RUN_A, RUN_B = "3c306fa3919c485f9e36c96d163aefdc", "7a705d3812e24a229b5fa4faf6174e81"
ACTOR = "8b1e729b8f81409a9f2953615525b3ba"
HASH_A = "55e3058a4f53c5c192bc8938f34f81e7e1b1eddcdff06d32b2847e6c0696f9ae"
HASH_B = "4e146130a6787e922be1b47104965476bef6cf844fc9b97754c33c969a731e50"
AT = datetime(2026, 12, 6, 21, 55, 47, tzinfo=UTC)


def _run(run_id: str, digest: str, sql: bytes = b"SELECT $1") -> dict[str, list[Recorded]]:
    values = [run_id, ACTOR, f"sha256:{digest}", JsonValue({"key": f"{run_id}:1:apply"}), AT, 3]
    return {phase: [Recorded(sql, values, 1, False)] for phase in PHASES}


def test_tokens_are_found_in_text_and_deep_in_json() -> None:
    value = ["x", JsonValue({RUN_A: [f"{ACTOR}:1"]}), f"v2:sha256:{HASH_A}", "worker:vm:2372"]
    assert tokens_in(value) == {RUN_A, ACTOR, HASH_A}


def test_a_runs_own_tokens_are_those_the_other_run_does_not_have() -> None:
    assert run_scoped(_run(RUN_A, HASH_A), _run(RUN_B, HASH_B)) == {RUN_A, HASH_A}


def test_two_runs_that_sent_different_statements_are_refused() -> None:
    with pytest.raises(RuntimeError, match="different statements"):
        run_scoped(_run(RUN_A, HASH_A), _run(RUN_B, HASH_B, sql=b"SELECT $2"))


def test_each_run_gets_its_own_values_of_the_same_shape_and_the_shared_ones_stay() -> None:
    recorded = _run(RUN_A, HASH_A)["first"][0].values
    tokens = frozenset({RUN_A, HASH_A})
    one, two = (values_for(recorded, tokens, n, timedelta(seconds=5)) for n in (1, 2))
    for run, values in ((1, one), (2, two)):
        mine = own_token(RUN_A, run)
        assert len(mine) == 32 and mine != RUN_A
        assert values[0] == mine
        assert values[1] == ACTOR
        assert values[2] == f"sha256:{own_token(HASH_A, run)}"
        assert isinstance(values[3], Jsonb)
        assert json.loads(values[3].dumps(values[3].obj)) == {"key": f"{mine}:1:apply"}
        assert values[4] == AT + timedelta(seconds=5)
        assert values[5] == 3
    assert one[0] != two[0] and one[2] != two[2]


def test_a_callers_runs_are_planned_before_the_clock_with_their_times_moved_to_now() -> None:
    template = _run(RUN_A, HASH_A)
    recorded_at = AT - timedelta(minutes=1)  # its lease (AT) had a minute left then
    planned = plans(template, frozenset({RUN_A}), range(3, 6), ("enqueue", "second"), recorded_at)
    assert set(planned) == {"enqueue", "second"}
    assert len(planned["enqueue"]) == 3
    ((recorded, values),) = planned["second"][2]  # the third of runs 3 to 5: run 5
    assert recorded is template["second"][0]
    assert values[0] == own_token(RUN_A, 5)
    left = values[4] - datetime.now(UTC)
    assert timedelta(seconds=50) < left <= timedelta(minutes=1)
