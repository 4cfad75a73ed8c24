"""Runs as the console and ``/v1/runs`` show them: scoped to what the actor may read.

A listing holds the runs of the flow versions whose operator or viewer roles the actor holds
(``visibility.flow_readers``), so it never shows a run the detail pages would hide. A run that
is readable only because one of its interrupts asks the actor's roles is reached from the
inbox, not listed here. Ids may be given as a unique prefix (6+ characters), as in the CLI;
a prefix resolves among the runs the actor may read, so that an answer tells nothing about
the others.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from models.contracts import ActorView, Frozen, InterruptView, RunView
from models.db import transaction, utcnow
from models.enums import RunState
from models.errors import (
    AmbiguousIdError,
    FlowVersionError,
    InvalidInputError,
    RunNotFoundError,
    UnknownFlowError,
)
from models.identity import normal_actor_id
from models.operator_queries import MAX_CANDIDATES, ids_with_prefix
from models.run_pages import (
    FlowScope,
    RunFilter,
    counts_by_state,
    decode_cursor,
    encode_cursor,
    page_of_runs,
)
from models.tables import Run
from worker import arguments
from worker.flows.flow import get_flow, registered_flows
from worker.present.ids import MIN_PREFIX
from worker.web.visibility import flow_readers, readable_run

MAX_PAGE = 200
# Run ids are 32 hex digits (models.storable.new_id).
ID_LENGTH = 32


class RunRow(Frozen):
    """One run in a listing."""

    id: str
    flow_name: str
    flow_version: int
    state: str
    next_step: str | None
    started_by: str | None
    forked_from: str | None
    error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None


class RunPage(Frozen):
    items: list[RunRow]
    # Pass back as ``cursor`` for the next (older) page; None when this page is the last.
    next_cursor: str | None


@dataclass(frozen=True)
class Filters:
    """A listing's filters as given (``older_than`` in seconds), checked by ``run_filter``."""

    state: str | None = None
    flow: str | None = None
    started_by: str | None = None
    older_than: float | None = None


def flow_scope(actor: ActorView) -> list[FlowScope]:
    """The flow versions whose runs ``actor`` reads, as the detail pages decide it."""
    roles = set(actor.roles)
    _, flows = registered_flows()
    known: dict[str, set[int]] = {}
    for flow in flows:
        known.setdefault(flow.name, set()).add(flow.version)
    scope = []
    for name, versions in sorted(known.items()):
        readable = frozenset(v for v in versions if roles & flow_readers(name, v))
        # A version not registered here is read with the newest's roles (flow_readers).
        others = max(versions) in readable
        if readable:
            scope.append(FlowScope(name, readable, others, frozenset(versions)))
    return scope


def run_filter(given: Filters) -> RunFilter:
    """The filter ``given`` stands for, or InvalidInputError naming the bad field."""
    state = None
    if given.state:
        try:
            state = RunState(given.state)
        except ValueError:
            allowed = ", ".join(s.value for s in RunState)
            raise InvalidInputError(
                detail=f"unknown state {given.state!r}; one of {allowed}"
            ) from None
    flow = arguments.optional_text("flow", given.flow or None)
    started_by = arguments.optional_text("started_by", given.started_by or None)
    before = None
    if given.older_than is not None:
        before = utcnow() - timedelta(seconds=given.older_than)
    return RunFilter(
        state=state,
        flow=flow,
        # Stored in its normal form (enqueue_run): `Alice` finds alice's runs.
        started_by=normal_actor_id(started_by) if started_by is not None else None,
        created_before=before,
    )


def runs_page(
    actor: ActorView, given: Filters, *, cursor: str | None = None, limit: int = 50
) -> RunPage:
    """The runs ``actor`` reads that match ``given``, newest first, ``limit`` at a time."""
    return listing(actor, given, cursor=cursor, limit=limit)[0]


def listing(
    actor: ActorView,
    given: Filters,
    *,
    cursor: str | None = None,
    limit: int = 50,
    counts: bool = False,
) -> tuple[RunPage, dict[str, int]]:
    """``runs_page``, and with ``counts`` how many runs the filters (but the state) match per
    state, read together."""
    if not 1 <= limit <= MAX_PAGE:
        raise InvalidInputError(detail=f"limit must be 1 to {MAX_PAGE}")
    wanted = run_filter(given)
    after = decode_cursor(cursor) if cursor else None
    scope = flow_scope(actor)
    with transaction(readonly=True) as session:
        rows, more = page_of_runs(session, scope, wanted, after=after, limit=limit)
        by_state = counts_by_state(session, scope, wanted) if counts else {}
    items = [RunRow.model_validate(row, from_attributes=True) for row in rows]
    last = items[-1] if items and more else None
    page = RunPage(
        items=items, next_cursor=encode_cursor(last.created_at, last.id) if last else None
    )
    return page, by_state


def readable(actor: ActorView, given: str) -> tuple[RunView, list[InterruptView]]:
    """The run ``given`` names (its id or a unique prefix among the runs ``actor`` reads) and
    its interrupts; RunNotFoundError, as for a missing id, when there is none the actor reads."""
    text = given.strip().lower()
    if len(text) < MIN_PREFIX:
        raise InvalidInputError(
            detail=f"run id {given!r} is too short: give at least {MIN_PREFIX} characters"
        )
    if len(text) == ID_LENGTH:
        candidates = [text]  # a whole id: nothing longer starts with it
    else:
        with transaction(readonly=True) as session:
            candidates = ids_with_prefix(session, Run, text)
        if text in candidates:
            candidates = [text]
    found = []
    for candidate in candidates:
        try:
            found.append(readable_run(actor, candidate))
        except RunNotFoundError:
            continue
    if not found:
        raise RunNotFoundError(run_id=given)
    if len(found) > 1:
        shown = ", ".join(run.id for run, _ in found[:MAX_CANDIDATES])
        raise AmbiguousIdError(kind="run", prefix=given, candidates=shown)
    return found[0]


def may_operate(actor: ActorView, run: RunView) -> bool:
    """Whether ``actor`` holds one of the operator roles of the run's flow (as
    ``authority.operator_roles`` decides them: the pinned version's, else the newest's)."""
    try:
        flow = get_flow(run.flow_name, run.flow_version)
    except FlowVersionError:
        flow = get_flow(run.flow_name)
    except UnknownFlowError:
        return False
    return bool(set(actor.roles) & set(flow.operator_roles))
