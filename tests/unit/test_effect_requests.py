"""What an effect's call is compared by when its key is used again, without any service.

The request hash must be the same for the same arguments in any process and after a trip
through either database's JSON (else a step that runs again would be refused its own call's
receipt), and differ for other arguments (else it would be given another call's receipt).
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import subprocess
import sys
from decimal import Decimal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from models.canonical import request_hash
from models.contracts import json_copy
from models.errors import EffectError

ROOT = Path(__file__).resolve().parents[2]


class Color(enum.StrEnum):
    RED = "red"


class Size(enum.IntEnum):
    LARGE = 3


class Client:
    """A value that is not JSON and has no stable form: its repr names its address."""


@dataclasses.dataclass
class Line:
    sku: str
    quantity: int


def _same(a: tuple[Any, ...], b: tuple[Any, ...], **kwargs: Any) -> bool:
    return request_hash(a, kwargs) == request_hash(b, kwargs)


def test_the_same_arguments_give_the_same_hash_and_others_another() -> None:
    order = {"zeta": -0.0, "alpha": [1, 2.5, {"b": 5.0, "a": "x"}], "amount": 1e20}
    # As PostgreSQL's JSONB gives them back: 1e20 as an integer, -0.0 as 0.0, keys reordered
    read_back = {"alpha": [1, 2.5, {"a": "x", "b": 5}], "amount": 10**20, "zeta": 0.0}
    assert _same((order,), (read_back,))
    assert _same((order,), (json_copy(order),))
    assert _same((5,), (5.0,))
    assert _same((Decimal("5.00"),), (5,))
    assert _same((1.5e300,), (Decimal("1.5e300"),))
    assert _same(((1, "a"),), ([1, "a"],))
    assert _same(({1: "a", False: 2, None: 3},), ({"1": "a", "false": 2, "null": 3},))
    assert _same((Color.RED, Size.LARGE), ("red", 3))
    assert request_hash((), {"a": 1, "b": 2}) == request_hash((), {"b": 2, "a": 1})
    assert _same((Client(),), (Client(),))
    assert _same((Line("x", 1),), (Line("x", 1),))
    # Other values are other calls
    assert not _same((5,), (6,))
    assert not _same((5,), ("5",))
    assert not _same((1,), (True,))
    assert not _same((0,), (None,))
    assert not _same(("null",), (None,))
    assert not _same(([1, 2],), ([2, 1],))
    assert not _same((0.1,), (0.1000001,))
    assert not _same((10**20,), (10**20 + 1,))
    assert not _same((Line("x", 1),), (Line("x", 2),))
    assert not _same((Decimal("1.5"),), (Decimal("1.6"),))
    assert request_hash((5,), {}) != request_hash((), {"amount": 5})
    assert request_hash((), {"a": 5}) != request_hash((), {"b": 5})


# Values whose repr differs from one process to the next: a set of strings (its order follows
# the string hash seed) and objects that print their address.
_IN_A_PROCESS = """
import datetime, decimal, sys, uuid
from pydantic import BaseModel
from models.canonical import request_hash

class Item(BaseModel):
    sku: str
    tags: frozenset[str]

class Client:
    pass

args = (
    {"alpha", "beta", "gamma", "delta", "epsilon"},
    Client(),
    Item(sku="x", tags=frozenset({"a", "b", "c", "d"})),
    datetime.datetime(2026, 1, 1, 12, 30),
    uuid.UUID(int=7),
    decimal.Decimal("19.90"),
    b"\\x00\\xff",
)
print(request_hash(args, {"client": Client(), "flags": frozenset({"x", "y", "z"})}))
"""


def test_the_same_arguments_give_the_same_hash_in_another_process() -> None:
    def in_a_process(seed: str) -> str:
        env = dict(os.environ, PYTHONHASHSEED=seed)
        done = subprocess.run(
            [sys.executable, "-c", _IN_A_PROCESS],
            env=env,
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        )
        return done.stdout.strip()

    hashes = {in_a_process(seed) for seed in ("1", "2", "3", "4")}
    assert len(hashes) == 1, hashes


def test_the_hash_never_raises() -> None:
    cycle: list[Any] = [1]
    cycle.append(cycle)
    deep: Any = []
    for _ in range(100_000):
        deep = [deep]
    odd = {(1, 2): "tuple key", frozenset({1}): "set key", "text": "\x00\ud800"}
    for args in [(cycle,), (deep,), (odd,), (float("nan"), float("inf"), Decimal("NaN"))]:
        assert request_hash(args, {}).startswith("v2:sha256:")
    assert _same((cycle,), (cycle,))
    assert not _same((float("nan"),), (float("inf"),))


def test_values_of_interludes_own_types_hash_as_before_worker_was_laid_out() -> None:
    # An intent recorded before worker/ moved into subpackages named the types by the modules
    # they had then (models.canonical.FORMER_MODULES); the step that executes again after the
    # upgrade must give the same hash, or its own call would be refused.
    # (Hashes computed with the modules at their old places, before the move.)
    from models.enums import Decision
    from worker import BudgetGrant, OperatorRelease, RepairResolution, Resume

    grant = BudgetGrant(units=5, note="n")
    assert request_hash((grant,), {}) == (
        "v2:sha256:1166787a5b386c349c8c5999df05dfe9f4a19c1ea8dfe710deeeabcc0b114949"
    )
    repair = RepairResolution(outcome="applied", receipt={"id": 1})
    assert request_hash((repair,), {"k": [1, 2.0]}) == (
        "v2:sha256:57abbd14591b8d6b0a75b61c6dfca1d39d713f96ccad809059dfe4a98088ac79"
    )
    answer = Resume("i1", Decision.APPROVED, BudgetGrant(units=5), "human:ada")
    assert request_hash((answer,), {"grant": OperatorRelease(note="go")}) == (
        "v2:sha256:ab013887e285f5e743d9bcddb405d98c3b63002ec20a742aad0053ce89f93682"
    )


def test_every_former_module_name_is_an_old_place_of_a_module_that_exists() -> None:
    import importlib

    from models.canonical import FORMER_MODULES

    for module, former in FORMER_MODULES.items():
        importlib.import_module(module)
        assert former.startswith("worker.") and former != module


def test_a_recorded_hash_of_an_earlier_version_is_not_compared() -> None:
    # Rows recorded before the request hash was stable ("sha256:..." over json.dumps with
    # repr) would refuse a run that waited across the upgrade its own call's receipt.
    from models.effects import LedgerEntry
    from worker.engine.effects import _same_request

    ctx: Any = SimpleNamespace(run_id="r1")
    now = request_hash((5,), {})
    legacy = "sha256:" + "0" * 64
    _same_request(ctx, "pay", "k", LedgerEntry("k", "pay", "applied", {}, 1, legacy), now)
    _same_request(ctx, "pay", "k", LedgerEntry("k", "pay", "applied", {}, 1, now), now)
    other = request_hash((6,), {})
    with pytest.raises(EffectError, match="called again with other arguments"):
        _same_request(ctx, "pay", "k", LedgerEntry("k", "pay", "applied", {}, 1, other), now)


def test_a_default_key_longer_than_the_ledger_keeps_is_refused() -> None:
    from worker.engine.effects import perform

    # (Refused before anything is read or written: this scope has neither flow nor database.)
    ctx: Any = SimpleNamespace(run_id="r" * 32, checkpoint_seq=3, step="s" * 180)
    with pytest.raises(EffectError) as caught:
        perform(ctx, "n" * 200, json.dumps, (), {}, reconcile=None, key=None)
    message = str(caught.value)
    assert "default idempotency key (run:checkpoint:step:name) is 416 characters long" in message
    assert "more than 400: shorten the name, or pass key=" in message
