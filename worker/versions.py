"""Which flow versions still have runs, and whether this process can continue each of them.

The question to answer before a deployment retires a version: a run of a version that is
neither registered nor migrated from by a registered version would be refused (it fails
closed and waits for code that can continue it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from models import queries
from models.db import transaction
from models.enums import TERMINAL_STATES, RunState
from models.errors import FlowVersionError, UnknownFlowError
from worker.flows import continuation, registered_versions

UNFINISHED = tuple(s.value for s in RunState if s not in TERMINAL_STATES)


@dataclass(frozen=True)
class FlowVersion:
    """One version of one flow: whether it is here, and its unfinished runs by state."""

    flow: str
    version: int
    registered: bool
    # The registered version that continues its runs through a declared migration, if any.
    migrates_to: int | None
    runs: dict[str, int] = field(default_factory=dict)

    @property
    def unfinished(self) -> int:
        return sum(self.runs.values())

    @property
    def stranded(self) -> bool:
        """Runs exist that no flow code here can continue."""
        return self.unfinished > 0 and not self.registered and self.migrates_to is None

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
    for flow, version, state, count in counts:
        runs.setdefault((flow, version), {})[state] = count
    found = []
    for flow, version in sorted(here | runs.keys()):
        by_state = runs.get((flow, version), {})
        found.append(
            FlowVersion(
                flow=flow,
                version=version,
                registered=(flow, version) in here,
                migrates_to=None if (flow, version) in here else _migrates_to(flow, version),
                runs={state: by_state.get(state, 0) for state in UNFINISHED},
            )
        )
    return found


def _migrates_to(flow: str, version: int) -> int | None:
    try:
        target, _ = continuation(flow, version)
    except (FlowVersionError, UnknownFlowError):
        return None
    return target.version


def stranded(versions: list[FlowVersion]) -> list[FlowVersion]:
    return [v for v in versions if v.stranded]
