"""What a chaos run found: every check the report prints, and which of them are violations.

Violations (the run exits non-zero): lost, stuck or failed runs; an effect applied twice at
the deduplicating target, twice at the fencing target, or twice at the plain one by the same
owner (same fencing token); a ledger receipt that differs from the target's; a second accepted
resume for one interrupt; a gap in a run's checkpoints; a fault after which its in-flight runs
never moved again; a run in which no process was frozen inside an effect's call.
Two landings at the plain target with *different* tokens are a frozen owner's late call
(README, Guarantee 2): reported as a figure, not a violation, since the deduplicating target
absorbed it and the fencing target refused it.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import Engine, func, select

from bench.chaos.faults import FREEZE_IN_EFFECT, Fault
from bench.chaos.flow import EFFECTS, lookup, target
from bench.chaos.traffic import Traffic
from models.tables import Checkpoint, Effect, Event, ResumeAttempt, Run

PROGRESS = ("advance", "complete", "suspend")
TERMINAL = ("succeeded", "failed", "cancelled", "expired")


@dataclass
class Findings:
    started: int = 0
    states: Counter[str] = field(default_factory=Counter)
    faults: Counter[str] = field(default_factory=Counter)
    lost: list[str] = field(default_factory=list)
    stuck: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)
    applied: int = 0
    dedup_duplicates: list[str] = field(default_factory=list)
    zombie_duplicates: list[str] = field(default_factory=list)
    owner_duplicates: list[str] = field(default_factory=list)
    fenced_duplicates: list[str] = field(default_factory=list)
    fenced_refused: int = 0
    receipt_mismatches: list[str] = field(default_factory=list)
    double_accepts: list[str] = field(default_factory=list)
    checkpoint_gaps: list[str] = field(default_factory=list)
    recovery: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    unrecovered: list[str] = field(default_factory=list)
    quiet: int = 0
    injection_errors: list[str] = field(default_factory=list)

    def violations(self) -> list[str]:
        checks = {
            "lost runs": self.lost,
            "stuck runs": self.stuck,
            "failed runs": self.failed,
            "duplicates at the deduplicating target": self.dedup_duplicates,
            "duplicates by one owner at the plain target": self.owner_duplicates,
            "duplicates at the fencing target": self.fenced_duplicates,
            "ledger receipts that differ from the target": self.receipt_mismatches,
            "double accepts": self.double_accepts,
            "checkpoint gaps": self.checkpoint_gaps,
            "faults never recovered from": self.unrecovered,
        }
        found = [f"{name}: {len(items)}" for name, items in checks.items() if items]
        if not self.faults[FREEZE_IN_EFFECT]:
            found.append("no process was frozen inside an effect's call")
        return found


def examine(engine: Engine, traffic: Traffic, faults: list[Fault]) -> Findings:
    found = Findings(started=len(traffic.started))
    found.faults.update(f.kind for f in faults)
    run_ids = list(traffic.started.values())
    with engine.connect() as conn:
        rows = conn.execute(select(Run.id, Run.state, Run.error).where(Run.id.in_(run_ids)))
        states = {run_id: (state, error) for run_id, state, error in rows}
        seqs: dict[str, list[int]] = defaultdict(list)
        for run_id, seq in conn.execute(
            select(Checkpoint.run_id, Checkpoint.seq)
            .where(Checkpoint.run_id.in_(run_ids))
            .order_by(Checkpoint.run_id, Checkpoint.seq)
        ):
            seqs[run_id].append(seq)
        ledger = conn.execute(
            select(
                Effect.run_id, Effect.name, Effect.idempotency_key, Effect.status, Effect.receipt
            ).where(Effect.run_id.in_(run_ids))
        ).all()
        doubles = conn.execute(
            select(ResumeAttempt.interrupt_id)
            .where(ResumeAttempt.run_id.in_(run_ids), ResumeAttempt.outcome == "accepted")
            .group_by(ResumeAttempt.interrupt_id)
            .having(func.count() > 1)
        ).scalars()
        found.double_accepts = sorted({str(i) for i in doubles})
        progress: dict[str, list[Any]] = defaultdict(list)
        for run_id, event_id, at in conn.execute(
            select(Event.run_id, Event.id, Event.at)
            .where(Event.run_id.in_(run_ids), Event.trigger.in_(PROGRESS))
            .order_by(Event.id)
        ):
            progress[run_id].append((event_id, at))
    found.double_accepts += sorted(i for i, n in traffic.accepted_seen.items() if n > 1)
    for key, run_id in traffic.started.items():
        if run_id not in states:
            found.lost.append(f"{key} ({run_id})")
            continue
        state, error = states[run_id]
        found.states[state] += 1
        if state == "failed":
            found.failed.append(f"{run_id}: {error}")
        elif state not in TERMINAL:
            found.stuck.append(f"{run_id}: {state}")
        if seqs[run_id] != list(range(len(seqs[run_id]))):
            found.checkpoint_gaps.append(f"{run_id}: {seqs[run_id]}")
    _effects(found, run_ids, states, ledger)
    for fault in faults:
        _recovery(found, fault, progress)
    return found


def _effects(
    found: Findings, run_ids: list[str], states: dict[str, Any], ledger: Sequence[Any]
) -> None:
    r = target()
    for run_id in run_ids:
        for effect in EFFECTS:
            keys = r.smembers(f"applied:{run_id}:{effect}")
            tokens = [int(t) for t in r.lrange(f"landed:{run_id}:{effect}", 0, -1)]
            if len(keys) > 1:
                found.dedup_duplicates.append(f"{run_id} {effect}: keys {sorted(keys)}")
            if len(tokens) > 1:
                where = found.zombie_duplicates
                if len(set(tokens)) < len(tokens):
                    where = found.owner_duplicates
                where.append(f"{run_id} {effect}: fencing tokens {tokens}")
            kept = [int(t) for t in r.lrange(f"fenced:landed:{run_id}:{effect}", 0, -1)]
            if len(kept) > 1:
                found.fenced_duplicates.append(f"{run_id} {effect}: fencing tokens {kept}")
            found.fenced_refused += r.llen(f"fenced:refused:{run_id}:{effect}")
    for run_id, name, key, status, receipt in ledger:
        if status != "applied":
            continue
        found.applied += 1
        at_target = lookup(key)
        if receipt != at_target:
            found.receipt_mismatches.append(f"{run_id} {name}: {receipt} vs {at_target}")
    for run_id, (state, _) in states.items():
        recorded = {name for r_id, name, _, status, _ in ledger if r_id == run_id}
        if state == "succeeded" and recorded != set(EFFECTS):
            found.receipt_mismatches.append(f"{run_id}: ledger holds {sorted(recorded)}")


def _recovery(found: Findings, fault: Fault, progress: dict[str, list[Any]]) -> None:
    """Seconds until every run in flight at the fault moved again (a checkpoint or a wait)."""
    if not fault.in_flight:
        found.quiet += 1
        return
    worst = 0.0
    for run_id, seen in fault.in_flight.items():
        later = [at for event_id, at in progress.get(run_id, []) if event_id > seen]
        if not later:
            found.unrecovered.append(f"{fault.kind} at {fault.at.isoformat()}: {run_id}")
            return
        # (a commit stamped just before the fault but visible only after it counts as 0)
        worst = max(worst, (later[0] - fault.at).total_seconds(), 0.0)
    found.recovery[fault.kind].append(worst)


def render(found: Findings, traffic: Traffic, header: str) -> str:
    lines = [header]
    total = sum(found.faults.values())
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(found.faults.items()))
    lines.append(f"faults: {total} ({kinds or 'none'})")
    if found.injection_errors:
        lines.append(f"  not injected: {found.injection_errors}")
    states = ", ".join(f"{k} {n}" for k, n in sorted(found.states.items()))
    lines.append(f"runs: {found.started} started ({states})")
    lines.append(f"  lost {len(found.lost)}, stuck {len(found.stuck)}, failed {len(found.failed)}")
    for item in found.lost + found.stuck + found.failed:
        lines.append(f"    {item}")
    outcomes = ", ".join(f"{k} {n}" for k, n in sorted(traffic.outcomes.items()))
    modes = ", ".join(f"{k} {n}" for k, n in sorted(traffic.modes.items()))
    lines.append(f"resumes: {outcomes} (approvals answered: {modes})")
    lines.append(f"  repairs answered by the operator: {traffic.repairs_answered}")
    lines.append(f"  double accepts: {len(found.double_accepts)}")
    lines.append(f"effects recorded applied: {found.applied}")
    lines.append(
        f"  duplicates at the deduplicating target: {len(found.dedup_duplicates)}; at a plain "
        f"target: {len(found.zombie_duplicates) + len(found.owner_duplicates)} "
        f"({len(found.zombie_duplicates)} a frozen owner's late call with an older fencing "
        f"token, {len(found.owner_duplicates)} by one owner)"
    )
    for item in found.dedup_duplicates + found.zombie_duplicates + found.owner_duplicates:
        lines.append(f"    {item}")
    lines.append(
        f"  at a fencing target (refuses a token lower than one it has seen): "
        f"{len(found.fenced_duplicates)} duplicates, {found.fenced_refused} late calls refused"
    )
    for item in found.fenced_duplicates:
        lines.append(f"    {item}")
    lines.append(
        f"  processes frozen inside an effect's call: {found.faults[FREEZE_IN_EFFECT]} "
        "(each a zombie whose call lands after the run moved on)"
    )
    lines.append(f"  ledger receipts that differ from the target: {len(found.receipt_mismatches)}")
    for item in found.receipt_mismatches:
        lines.append(f"    {item}")
    lines.append(f"checkpoint gaps: {len(found.checkpoint_gaps)}")
    lines.append("recovery: seconds from a fault until every run then in flight moved again")
    lines.append(f"  {'fault':<18} {'n':>3} {'p50':>6} {'max':>6}")
    for kind, times in sorted(found.recovery.items()):
        p50 = statistics.median(times)
        lines.append(f"  {kind:<18} {len(times):>3} {p50:>6.1f} {max(times):>6.1f}")
    lines.append(f"  ({found.quiet} faults found no run in flight)")
    for item in found.unrecovered:
        lines.append(f"  never recovered: {item}")
    violations = found.violations()
    lines.append("result: " + ("OK, no violation" if not violations else "; ".join(violations)))
    return "\n".join(lines)
