"""A run's steps as operators read them: each step, when it ran, how long, what it changed.

Nothing more is stored per step than its checkpoint (the state it left, and when it started):
a step's output is what it changed in the flow state, read from two consecutive checkpoints —
bounded, and with credential-shaped text redacted as stored inputs are.
"""

from __future__ import annotations

import json
from datetime import datetime
from itertools import pairwise
from typing import Any

from models import queries
from models import runs as run_store
from models.contracts import Frozen
from models.db import transaction
from worker.gateway.actors import redact_shaped

# What a step's output shows of its changes, at most (as JSON text).
MAX_OUTPUT_CHARS = 8192


class StepView(Frozen):
    """One executed step: the checkpoint it committed, its timing and what it changed."""

    seq: int
    step: str
    next_step: str | None
    started_at: datetime | None
    finished_at: datetime
    duration_ms: float | None
    output: dict[str, Any]
    effects: list[str]


def list_steps(run_id: str) -> list[StepView]:
    """The run's executed steps, oldest first."""
    with transaction(readonly=True) as session:
        run_store.load_run(session, run_id)
        return steps_of(list(queries.checkpoints_of(session, run_id)))


def steps_of(checkpoints: list[Any]) -> list[StepView]:
    """The steps a run's checkpoint rows (in order) record."""
    steps = []
    for before, after in pairwise(checkpoints):
        if after.step is None:
            continue  # a migration's checkpoint: no step ran
        duration = (
            round((after.created_at - after.started_at).total_seconds() * 1000, 3)
            if after.started_at is not None
            else None
        )
        steps.append(
            StepView(
                seq=after.seq,
                step=after.step,
                next_step=after.next_step,
                started_at=after.started_at,
                finished_at=after.created_at,
                duration_ms=duration,
                output=step_output(before.state, after.state),
                effects=list(after.effects or []),
            )
        )
    return steps


def step_output(before: Any, after: Any) -> dict[str, Any]:
    """What a step changed in the flow state: keys set (with their values) and removed."""
    old = before if isinstance(before, dict) else {}
    new = after if isinstance(after, dict) else {}
    changed = {k: v for k, v in new.items() if k not in old or old[k] != v}
    removed = sorted(k for k in old if k not in new)
    output: dict[str, Any] = {"set": changed, "removed": removed}
    text = redact_shaped(json.dumps(output, sort_keys=True, default=str))
    if len(text) > MAX_OUTPUT_CHARS:
        return {"set_keys": sorted(changed), "removed": removed, "truncated": len(text)}
    shown: dict[str, Any] = json.loads(text)
    return shown
