"""Which flow versions still have runs, and whether this process can continue each of them.

The question to answer before a deployment retires a version: a run of a version that is
neither registered nor migrated from by a registered version would be refused (it fails
closed and waits for code that can continue it). So would a run at a step the continuing
version does not have (steps renamed without a new version), and one whose state the
declared migration cannot carry: the check runs each migration on a copy of every
unfinished run's state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models import queries
from models.db import transaction
from models.enums import TERMINAL_STATES, RunState
from models.errors import FlowDefinitionError, FlowVersionError, UnknownFlowError
from worker.flows.flow import Flow, Migration, continuation, registered_versions
from worker.flows.migration import migrated_state

UNFINISHED = tuple(s.value for s in RunState if s not in TERMINAL_STATES)
# Runs whose state one read gives the migration dry run (the default page of the query).
MIGRATION_PAGE = 500


@dataclass(frozen=True)
class FlowVersion:
    """One version of one flow: whether it is here, and its unfinished runs by state."""

    flow: str
    version: int
    registered: bool
    # The registered version that continues its runs through a declared migration, if any.
    migrates_to: int | None
    runs: dict[str, int] = field(default_factory=dict)
    # Why runs of it would be refused although a version here continues them.
    problems: tuple[str, ...] = ()

    @property
    def unfinished(self) -> int:
        return sum(self.runs.values())

    @property
    def stranded(self) -> bool:
        """Runs exist that no flow code here can continue."""
        return self.unfinished > 0 and not self.registered and self.migrates_to is None

    @property
    def blocked(self) -> bool:
        """Runs exist that the code here would refuse to continue."""
        return self.stranded or bool(self.problems)

    @property
    def status(self) -> str:
        if self.registered:
            return "registered"
        if self.migrates_to is not None:
            return f"migrates to v{self.migrates_to}"
        return "stranded"


def flow_versions() -> list[FlowVersion]:
    """Every version registered here or holding unfinished runs, by flow and version."""
    here = set(registered_versions())
    with transaction(readonly=True) as session:
        counts = queries.unfinished_runs_by_version(session)
    runs: dict[tuple[str, int], dict[str, int]] = {}
    at_step: dict[tuple[str, int], dict[str | None, int]] = {}
    for flow, version, state, step, count in counts:
        by_state = runs.setdefault((flow, version), {})
        by_state[state] = by_state.get(state, 0) + count
        by_step = at_step.setdefault((flow, version), {})
        by_step[step] = by_step.get(step, 0) + count
    found = []
    for flow, version in sorted(here | runs.keys()):
        by_state = runs.get((flow, version), {})
        target = _continuation(flow, version)
        problems: tuple[str, ...] = ()
        if target is not None and by_state:
            problems = _problems(flow, version, *target, at_step.get((flow, version), {}))
        found.append(
            FlowVersion(
                flow=flow,
                version=version,
                registered=(flow, version) in here,
                migrates_to=None
                if (flow, version) in here or target is None
                else target[0].version,
                runs={state: by_state.get(state, 0) for state in UNFINISHED},
                problems=problems,
            )
        )
    return found


def _continuation(flow: str, version: int) -> tuple[Flow, Migration | None] | None:
    try:
        return continuation(flow, version)
    except (FlowVersionError, UnknownFlowError):
        return None


def _problems(
    flow: str,
    version: int,
    target: Flow,
    migration: Migration | None,
    at_step: dict[str | None, int],
) -> tuple[str, ...]:
    """What would refuse the unfinished runs of ``flow`` ``version`` on ``target``."""
    found = [
        f"{count} unfinished run(s) are at step {step!r}, which version {target.version} "
        "does not have"
        for step, count in sorted(at_step.items(), key=lambda item: str(item[0]))
        if step is not None and step not in target.steps
    ]
    if migration is not None:
        failure = _migration_failure(flow, version, target.version, migration)
        if failure is not None:
            found.append(failure)
    return tuple(found)


def _migration_failure(
    flow: str, version: int, to_version: int, migration: Migration
) -> str | None:
    """The migration run on a copy of each unfinished run's latest state: how many it fails
    for, and the first failure's reason; None when it carries them all."""
    failed, first, after = 0, "", ""
    while True:
        with transaction(readonly=True) as session:
            page = queries.unfinished_run_states(
                session, flow, version, after=after, limit=MIGRATION_PAGE
            )
        for run_id, state in page:
            try:
                migrated_state(
                    migration, state, run_id=run_id, from_version=version, to_version=to_version
                )
            except FlowDefinitionError as exc:
                failed += 1
                first = first or str(exc)
        if len(page) < MIGRATION_PAGE:
            break
        after = page[-1][0]
    if not failed:
        return None
    return f"the migration fails for {failed} unfinished run(s); the first: {first}"


def blocked(versions: list[FlowVersion]) -> list[FlowVersion]:
    return [v for v in versions if v.blocked]
