"""W1's statements as interlude sends them, recorded from real runs, and each measured run's
values in their place: what ``bench.w1_record_floor`` replays.

``record`` runs W1 twice on a scratch database, in this process, through the test seam
(``worker.testing``), and keeps every statement sent (``models.driver``), with its values and
the rows it touched, by where interlude sends it: the caller (the enqueue; the answer, one
read and one write) or the worker (the first task: claim, suspend; the resume task: claim,
advance with the next claim, the effect's intent, the last commit). Values of the first run
that the second does not have (ids, idempotency keys, hashes over them: ``run_scoped``) are
the run's own; ``plans`` gives each measured run its own in their place, derived from its
number, and moves every time on by as much as the clock has since the recording.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import Enum
from typing import Any

from psycopg.types.json import Jsonb

# Where interlude sends each statement of a W1 run (``bench.w1 --count``: caller 3, worker 6).
CALLER_PHASES = ("enqueue", "resume")
TASK_PHASES = ("first", "second")
PHASES = ("enqueue", "first", "resume", "second")
# An id (uuid4's hex), or a SHA-256 in hex: the shapes of a run's own values.
_TOKEN = re.compile(r"\b(?:[0-9a-f]{64}|[0-9a-f]{32})\b")


@dataclass(frozen=True)
class JsonValue:
    """A JSON parameter as recorded (psycopg's ``Jsonb``), before it is made a run's own."""

    obj: Any


@dataclass(frozen=True)
class Recorded:
    """One statement as interlude sent it: its text (numbered parameters), its values, the rows
    it touched and whether it returns rows (read as the driver reads them)."""

    sql: bytes
    values: list[Any]
    rowcount: int
    returns_rows: bool


Template = dict[str, list[Recorded]]


def tokens_in(value: Any) -> set[str]:
    """Every id- or hash-shaped token in ``value``, however deep in JSON it is."""
    if isinstance(value, str):
        return set(_TOKEN.findall(value))
    if isinstance(value, JsonValue):
        return tokens_in(value.obj)
    if isinstance(value, list | tuple):
        return set().union(*(tokens_in(item) for item in value))
    if isinstance(value, dict):
        return set().union(*(tokens_in(k) | tokens_in(v) for k, v in value.items()))
    return set()


def run_scoped(first: Template, second: Template) -> frozenset[str]:
    """The tokens of the first run's values that the second run's do not have: its own."""
    if [(p, [r.sql for r in first[p]]) for p in PHASES] != [
        (p, [r.sql for r in second[p]]) for p in PHASES
    ]:
        raise RuntimeError("W1's two recorded runs sent different statements")
    mine = set().union(*(tokens_in(r.values) for p in PHASES for r in first[p]))
    theirs = set().union(*(tokens_in(r.values) for p in PHASES for r in second[p]))
    return frozenset(mine - theirs)


def own_token(token: str, run: int) -> str:
    """Run ``run``'s value in place of ``token``: of the same shape, unique to both."""
    return hashlib.sha256(f"{token}:{run}".encode()).hexdigest()[: len(token)]


def values_for(
    recorded: list[Any], tokens: frozenset[str], run: int, shift: timedelta
) -> list[Any]:
    """The values ``recorded`` as run ``run`` sends them: its own tokens, its own times, each
    JSON value as its text already (a floor: nothing done per statement that could be done
    before)."""
    mapping = {token: own_token(token, run) for token in tokens}

    def text(value: str) -> str:
        return _TOKEN.sub(lambda m: mapping.get(m.group(0), m.group(0)), value)

    def walk(value: Any) -> Any:
        if isinstance(value, str):
            return text(value)
        if isinstance(value, list):
            return [walk(item) for item in value]
        if isinstance(value, dict):
            return {walk(k): walk(v) for k, v in value.items()}
        return value

    values: list[Any] = []
    for value in recorded:
        if isinstance(value, str):
            values.append(text(value))
        elif isinstance(value, JsonValue):
            values.append(Jsonb(json.dumps(walk(value.obj)), dumps=_as_is))
        elif isinstance(value, datetime):
            values.append(value + shift)
        else:
            values.append(value)
    return values


def _as_is(text: str) -> str:
    return text


def _plain(value: Any) -> Any:
    """A recorded value as something another process can read back (a ``Jsonb`` as its
    object, an enumeration as its value)."""
    if isinstance(value, Jsonb):
        return JsonValue(value.obj)
    if isinstance(value, Enum):
        return value.value
    return value


def record(url: str) -> tuple[Template, Template, datetime]:
    """W1 twice on the database at ``url`` (migrated, with the bench's approver), in this
    process through the test seam: each run's statements by where interlude sends them, and
    when they were recorded."""
    from bench.w1 import contract, prepare
    from models import driver
    from models.db import dispose_engines

    credential = prepare(url)
    from worker import enqueue_run, list_interrupts, submit_resume
    from worker.flows.flow import load_flow_modules
    from worker.testing import recording

    load_flow_modules()
    runs: list[Template] = []
    phase = ""
    sent = driver.DriverStatement.execute

    def recorded(self: driver.DriverStatement, session: Any, given: dict[str, Any]) -> Any:
        values = [_plain(v) for v in self.arguments(given)]
        result = sent(self, session, given)
        runs[-1][phase].append(Recorded(self._raw, values, result.rowcount, self._returns_rows))
        return result

    driver.DriverStatement.execute = recorded  # type: ignore[method-assign]
    try:
        with recording() as tasks:
            for n in range(2):
                runs.append({p: [] for p in PHASES})
                phase = "enqueue"
                run_id = enqueue_run("bench_w1", {"n": n})
                phase = "first"
                tasks.drain()
                (interrupt,) = list_interrupts(run_id=run_id, status="pending")
                phase = "resume"
                if not submit_resume(contract(interrupt), credential).accepted:
                    raise RuntimeError("W1's recorded resume was refused")
                phase = "second"
                tasks.drain()
    finally:
        driver.DriverStatement.execute = sent  # type: ignore[method-assign]
        dispose_engines()
    return runs[0], runs[1], datetime.now(UTC)


def plans(
    template: Template,
    tokens: frozenset[str],
    numbers: range,
    phases: tuple[str, ...],
    recorded_at: datetime,
) -> dict[str, list[list[tuple[Recorded, list[Any]]]]]:
    """The statements of ``phases`` of the runs ``numbers``, in their order, each with that
    run's values, built now: every time moved on by as much as the clock has since
    ``recorded_at`` (a lease given then for a minute still has its minute)."""
    shift = datetime.now(UTC) - recorded_at
    return {
        phase: [
            [(r, values_for(r.values, tokens, run, shift)) for r in template[phase]]
            for run in numbers
        ]
        for phase in phases
    }
