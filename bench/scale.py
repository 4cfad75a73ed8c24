"""A million waiting runs: what they cost in PostgreSQL, and whether listings, sweeps and W1 notice.

    .venv/bin/python -m bench.scale [--runs 1000000] [--json]

In a scratch database (dropped at the end), in order:

1. the sample: ``--sample`` runs of the four flows of ``bench.scale_flows`` (approval, evidence,
   approval with escalation, budget; roles finance, compliance, sre/release-manager, ops;
   expiry policies expire, cancel, escalate, default), started by eight actors in turn and
   driven to their interrupt in this process through the engine's own code
   (``worker.testing.recording``), so through the stores' own statements;
2. the bulk: ``--runs`` minus the sample more waiting runs, copied from one run of the sample
   per flow (every row of the run, its checkpoints, its interrupt and its events) by one
   ``INSERT ... SELECT FROM unnest(...)`` per template row and chunk of runs: new ids (as the
   engine makes them), the run's number ``n`` wherever the template's stood (input, state,
   scope, evidence and its RFC 8785 hash, computed by the server), the starter of run ``n``,
   and every timestamp moved by the same amount so that the interrupt was asked at
   ``Spread.asked_at(n)``: the first 1,000 are overdue by up to an hour, the others were asked
   within the last six days and are due days from now. Then ``VACUUM ANALYZE``, as autovacuum
   would do soon after, and a ``CHECKPOINT``.
   One copy per flow is read back and compared, column by column, with what its template
   becomes for its ``n``;
3. bytes per waiting run: ``pg_total_relation_size`` (table, TOAST and indexes) of each table
   a waiting run has rows in, over the runs;
4. the operators' and responders' reads, each timed ``--repeat`` times after one untimed call
   (median and 99th percentile): what ``interlude interrupts list`` reads for its first page
   (``list_interrupts`` with the verb's limit, 200, and how long their runs waited; this is
   what the target is about), the web inbox's first page for an actor holding one role
   (``answerable_interrupts``, as the inbox page calls it) and for one whose role nothing
   asks yet (an empty inbox), and, for what a person waits at
   the terminal, the verbs ``interrupts list`` and ``runs show`` of one run as ``interlude``
   runs them once their command line is parsed, printing a table and ``--json`` to a buffer;
5. the sweep of the 1,000 due interrupts: ``sweep_report()`` in this process, publishes
   recorded (``worker.testing.recording``), timed until it returns, when every due interrupt
   has had its policy applied and its run moved on (expired, cancelled, escalated, or resumed
   with its default and published). A sweep starts no batch after one beat interval; on a
   machine too slow for that, further sweeps follow, as beat's would, and count;
6. ``--check`` bulk runs of each flow answered through ``submit_resume`` and driven to success:
   the copies are runs the engine accepts;
7. W1 (``bench.w1``'s flow, caller and worker, ``--w1-runs`` runs) on this database and on a
   fresh empty one in turn, ``--rounds`` times, each right after a ``CHECKPOINT``: runs/s,
   and the bytes of WAL written per run, median of each.

``--due-policy`` makes every due interrupt one flow's, so that the sweep applies that one
expiry policy 1,000 times (``default``: each a resume through the gateway's acceptance, the
policy a sweep applies one by one) instead of each a quarter of them. ``--grouped`` asks each
flow's runs in a block of their own instead of in turn, finance's the youngest, and makes the
due ones (the oldest) the other flows' (a third of each policy but expire): the inbox's role
then stands behind three quarters of a million other roles' interrupts, as a team's does when
its flow has gone live after the others'.

Targets (issue 41): interrupts list first page <= 50 ms, inbox first page <= 100 ms, the
sweep <= 1 s, W1 within 10 % of its rate on an empty database.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import math
import os
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from types import SimpleNamespace
from typing import Any

import psycopg
import redis

from bench import pg
from bench.processes import (
    BROKER_URL,
    INTERLUDE_QUEUES,
    bench_env,
    exclusive,
    start_worker,
    stop_worker,
)
from bench.w1 import ACTOR, Poller, configure, contract, prepare, ready_caller
from bench.waiting_rows import SQL_NULL, RunRows, ids_of, is_json, rows_of_run, tables
from models.db import EPOCH
from models.enums import ExpiryPolicy
from models.storable import id_at

FLOWS = "bench.flows,bench.scale_flows"
DUE = 1_000
# Runs per transaction of the bulk (one statement per template row and flow in each).
CHUNK = 50_000
# The runs' starters, taken in turn; the inbox is read as a reviewer holding one role.
STARTERS = [f"requester-{c}" for c in "abcdefgh"]
REVIEWER = "reviewer-finance"
REVIEWER_ROLES = ["finance"]
# Actors who hold the flows' other roles (an escalation to a role nobody holds says so).
HOLDERS = {"reviewer-sre-lead": ["sre-lead"], "reviewer-compliance": ["compliance", "ops"]}
# Whose inbox is also read while it is empty: nothing asks sre-lead until the sweep escalates.
LEAD = "reviewer-sre-lead"
# The template run of flow t has n = MARK + t: a number that occurs nowhere else in its rows.
MARK = 970_531_000
W1_TARGET = 0.9
MICROSECOND = timedelta(microseconds=1)
TARGETS_MS = {"interrupts_list": 50.0, "inbox": 100.0}
SWEEP_TARGET_SECONDS = 1.0


@dataclass(frozen=True)
class Spread:
    """When bulk run ``n`` of ``total`` asked its interrupt, so that exactly ``due`` are due.

    Runs ``n < due`` asked long enough ago that their deadline passed within ``overdue`` before
    ``now``; the others asked within ``window`` before ``now``, oldest first, so that an ask
    lasting longer than ``window`` is due only after ``now`` + its duration - ``window``.
    """

    total: int
    due: int
    now: datetime
    window: timedelta = timedelta(days=6)
    overdue: timedelta = timedelta(hours=1)
    # The template every due run copies (``--due-policy``); None: run n copies n % templates.
    due_template: int | None = None
    # The runs not due copy each template in a block of their own, the first template's
    # (finance, the inbox read's) the youngest, and the due ones the others in turn
    # (``--grouped``); else every run copies them in turn.
    grouped: bool = False

    def __post_init__(self) -> None:
        if not 0 <= self.due < self.total:
            raise ValueError(f"due must be 0 to {self.total - 1}, got {self.due}")

    def asked_at(self, n: int, lasts: timedelta) -> datetime:
        if lasts <= self.window:
            raise ValueError(f"an ask lasting {lasts} would fall due inside the {self.window}")
        if n < self.due:
            return self.now - lasts - self.overdue * (self.due - n) / self.due
        rest = self.total - self.due
        return self.now - self.window * (rest - (n - self.due)) / rest

    def deadline(self, n: int, lasts: timedelta) -> datetime:
        return self.asked_at(n, lasts) + lasts

    def template_of(self, n: int, templates: int) -> int:
        """The template run ``n`` copies, of ``templates``."""
        if n < self.due and self.due_template is not None:
            return self.due_template
        if not self.grouped:
            return n % templates
        if n < self.due:  # (the oldest of all: none the first template's, which come last)
            return 1 + n % (templates - 1)
        return templates - 1 - (n - self.due) * templates // (self.total - self.due)


def percentile(values: list[float], share: float) -> float:
    """The nearest-rank percentile ``share`` (0 to 1) of ``values``."""
    ordered = sorted(values)
    return ordered[max(0, min(len(ordered) - 1, math.ceil(share * len(ordered)) - 1))]


# --- the database ---------------------------------------------------------------------------


def use(url: str) -> None:
    """Point this process at ``url``, with the scale flows loaded beside W1's."""
    configure(url, None)
    os.environ["INTERLUDE_FLOWS"] = FLOWS
    from models.db import dispose_engines
    from models.settings import reset_settings

    reset_settings()
    dispose_engines()


def sample(count: int) -> dict[str, list[str]]:
    """``count`` runs of the scale flows (in turn) driven to their interrupt in this process;
    their ids by flow."""
    from bench.scale_flows import ASKS
    from worker import enqueue_run
    from worker.testing import recording

    by_flow: dict[str, list[str]] = {ask.flow: [] for ask in ASKS}
    with recording() as tasks:
        for i in range(count):
            ask = ASKS[i % len(ASKS)]
            n = MARK + i
            key = f"order-{n}-{ask.flow}"
            run_id = enqueue_run(ask.flow, {"n": n}, key, started_by=STARTERS[i % len(STARTERS)])
            by_flow[ask.flow].append(run_id)
        tasks.drain()
    return by_flow


def _canonical(value: Any) -> str:
    from models.canonical import canonical_json

    return str(canonical_json(value))


class Template:
    """One sample run's rows, and how to insert copies of them for runs ``n``."""

    def __init__(self, rows: RunRows, marker: int, lasts: timedelta) -> None:
        self.rows = rows
        self.marker = str(marker)
        self.lasts = lasts
        self.ids = ids_of(rows)
        self.starter = rows["runs"][0]["started_by"]
        self.asked = rows["interrupts"][0]["created_at"]
        if any(self.marker in i for i in self.ids):
            raise RuntimeError(f"template id contains the marker {self.marker}: pick another")

    def _text(self, param: str, value: str) -> str:
        """SQL for the template's text ``value`` made run ``u.n``'s: its number, ids, starter."""
        expr = f"%({param})s::text"
        if self.marker in value:
            expr = f"replace({expr}, '{self.marker}', u.n::text)"
        for k, old in enumerate(self.ids):
            if old in value:
                expr = f"replace({expr}, '{old}', u.id{k})"
        if self.starter and self.starter in value:
            expr = f"replace({expr}, '{self.starter}', u.starter)"
        return expr

    def statements(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """Per table and template row: an INSERT ... SELECT of its copies, with its values."""
        source = ", ".join(
            ["%(n)s::bigint[]", "%(shift)s::bigint[]", "%(starter)s::text[]"]
            + [f"%(id{k})s::text[]" for k in range(len(self.ids))]
        )
        names = ", ".join(["n", "shift", "starter"] + [f"id{k}" for k in range(len(self.ids))])
        for name, table in tables().items():
            for row in self.rows[name]:
                columns: list[str] = []
                exprs: list[str] = []
                values: dict[str, Any] = {}
                for c in table.c:
                    if c.autoincrement is True:
                        continue
                    value, param = row[c.name], f"c_{c.name}"
                    columns.append(c.name)
                    if name == "interrupts" and c.name == "evidence_hash":
                        values[param] = _canonical(row["evidence"])
                        text = self._text(param, values[param])
                        exprs.append(
                            f"'sha256:' || encode(sha256(convert_to({text}, 'UTF8')), 'hex')"
                        )
                    elif is_json(c):
                        if value is SQL_NULL:
                            exprs.append("NULL")
                        else:
                            values[param] = json.dumps(value)
                            exprs.append(f"({self._text(param, values[param])})::jsonb")
                    elif value is None:
                        exprs.append("NULL")
                    elif isinstance(value, datetime):
                        values[param] = value
                        exprs.append(
                            f"%({param})s::timestamptz + u.shift * interval '1 microsecond'"
                        )
                    elif isinstance(value, str):
                        values[param] = value
                        exprs.append(self._text(param, value))
                    else:
                        values[param] = value
                        exprs.append(f"%({param})s")
                sql = (
                    f"INSERT INTO {name} ({', '.join(columns)}) SELECT {', '.join(exprs)} "
                    f"FROM unnest({source}) AS u({names})"
                )
                yield sql, values

    def expected(self, n: int, new_ids: list[str], starter: str, shift: timedelta) -> RunRows:
        """The rows a copy for run ``n`` must have (events' own ids aside)."""
        ids = dict(zip(self.ids, new_ids, strict=True))
        if self.starter:
            ids[self.starter] = starter

        def made(value: Any) -> Any:
            if isinstance(value, datetime):
                return value + shift
            if isinstance(value, str):
                value = value.replace(self.marker, str(n))
                for old, new in ids.items():  # (as the server's replace(): anywhere in the text)
                    value = value.replace(old, new)
                return value
            if isinstance(value, dict):
                return {made(k): made(v) for k, v in value.items()}
            if isinstance(value, list):
                return [made(v) for v in value]
            if isinstance(value, int) and not isinstance(value, bool) and str(value) == self.marker:
                return n
            return value

        found = {
            name: [{k: made(v) for k, v in row.items()} for row in rows]
            for name, rows in self.rows.items()
        }
        from models.canonical import evidence_hash

        for interrupt in found["interrupts"]:
            interrupt["evidence_hash"] = evidence_hash(interrupt["evidence"])
        return found


def templates(url: str, by_flow: dict[str, list[str]]) -> list[Template]:
    from bench.scale_flows import ASKS
    from models.db import get_engine

    found = []
    with get_engine(url).connect() as conn:
        for t, ask in enumerate(ASKS):
            rows = rows_of_run(conn, by_flow[ask.flow][0])
            if rows["runs"][0]["input"] != {"n": MARK + t} or len(rows["interrupts"]) != 1:
                raise RuntimeError(f"the template of {ask.flow} is not its first sample run")
            found.append(Template(rows, MARK + t, ask.lasts))
    return found


@dataclass
class Placement:
    """Which runs of a chunk each template copies, and their ids, starters and shifts."""

    n: list[int]
    shift: list[int]  # microseconds
    starter: list[str]
    ids: list[list[str]]


def placements(spread: Spread, tpls: list[Template], first: int, last: int) -> list[Placement]:
    """Runs ``first`` to ``last`` - 1 of the bulk, split among the templates
    (``Spread.template_of``)."""
    found = [Placement([], [], [], [[] for _ in t.ids]) for t in tpls]
    for n in range(first, last):
        t = spread.template_of(n, len(tpls))
        tpl, place = tpls[t], found[t]
        asked = spread.asked_at(n, tpl.lasts)
        place.n.append(n)
        place.shift.append((asked - tpl.asked) // MICROSECOND)
        place.starter.append(STARTERS[n % len(STARTERS)])
        # Ids as the engine makes them, at the moment the copy asked (its rows a millisecond
        # apart): a bulk asked over days spreads over every prefix, as waiting runs do.
        micros = (asked - EPOCH) // MICROSECOND
        for k, column in enumerate(place.ids):
            column.append(id_at(micros + 1000 * k))
    return found


def fill(name: str, tpls: list[Template], spread: Spread) -> dict[str, Any]:
    """Insert bulk runs 0 to ``spread.total`` - 1, a transaction per CHUNK; then VACUUM
    ANALYZE. Returns the seconds each part took, the first copy of each template (to check)
    and a run of the last chunk."""
    statements = [list(t.statements()) for t in tpls]
    picked: dict[int, Any] = {}
    started = time.perf_counter()
    with psycopg.connect(pg.dsn(name)) as conn:
        for low in range(0, spread.total, CHUNK):
            high = min(low + CHUNK, spread.total)
            for t, place in enumerate(placements(spread, tpls, low, high)):
                if not place.n:
                    continue
                params = {"n": place.n, "shift": place.shift, "starter": place.starter}
                params.update({f"id{k}": ids for k, ids in enumerate(place.ids)})
                for sql, values in statements[t]:
                    conn.execute(sql, {**values, **params})
                if t not in picked:
                    picked[t] = (
                        place.n[0],
                        [i[0] for i in place.ids],
                        place.starter[0],
                        place.shift[0],
                    )
                last_run = place.ids[0][-1]
            conn.commit()
        inserted = time.perf_counter() - started
        conn.autocommit = True
        for table in tables():
            conn.execute(f"VACUUM ANALYZE {table}")
        # The fill wrote gigabytes of WAL in minutes, and the server checkpoints it a few
        # seconds at a time for a while after (its log: "checkpoints are occurring too
        # frequently"); a database whose runs waited for days has long done that. One
        # checkpoint now, so that the measurements below do not run beside the fill's last.
        conn.execute("CHECKPOINT")
    return {
        "insert_seconds": inserted,
        "vacuum_seconds": time.perf_counter() - started - inserted,
        "picked": picked,
        "last_run": last_run,
    }


def check_copies(url: str, tpls: list[Template], picked: dict[int, Any]) -> None:
    """Each picked copy's rows are exactly what its template becomes for its ``n``."""
    from models.canonical import evidence_hash
    from models.db import get_engine

    with get_engine(url).connect() as conn:
        for t, (n, new_ids, starter, shift) in picked.items():
            copy = rows_of_run(conn, new_ids[0])
            want = tpls[t].expected(n, new_ids, starter, shift * MICROSECOND)
            for name, rows in want.items():
                got = copy[name]
                if len(got) != len(rows):
                    raise RuntimeError(f"bulk run {n}: {len(got)} {name} rows, not {len(rows)}")
                for expected_row, row in zip(rows, got, strict=True):
                    differ = {
                        k
                        for k, v in row.items()
                        if v != expected_row[k] and not (name == "events" and k == "id")
                    }
                    if differ:
                        raise RuntimeError(f"bulk run {n}: {name} differs in {sorted(differ)}")
            for interrupt in copy["interrupts"]:
                if interrupt["evidence_hash"] != evidence_hash(interrupt["evidence"]):
                    raise RuntimeError(f"bulk run {n}: the evidence hash is not its evidence's")


def sizes(name: str, runs: int) -> dict[str, Any]:
    """Bytes of each table a waiting run has rows in (table with TOAST, indexes), per run."""
    found: dict[str, Any] = {}
    with psycopg.connect(pg.dsn(name)) as conn:
        # (The interrupt's roles, kept by triggers, besides the rows a run is copied from.)
        for table in [*tables(), "pending_interrupt_roles"]:
            row = conn.execute(
                "SELECT pg_table_size(%s), pg_indexes_size(%s), pg_total_relation_size(%s)",
                (table, table, table),
            ).fetchone()
            assert row is not None
            found[table] = {"table": row[0], "indexes": row[1], "total": row[2]}
    total = sum(t["total"] for t in found.values())
    return {"tables": found, "total": total, "per_run": total / runs}


# --- the reads ------------------------------------------------------------------------------


def timed(call: Callable[[], object], repeat: int) -> dict[str, Any]:
    """Milliseconds of ``call`` (one untimed call first): median, 99th percentile, each."""
    call()
    seconds = []
    for _ in range(repeat):
        started = time.perf_counter()
        call()
        seconds.append((time.perf_counter() - started) * 1000)
    return {"median": statistics.median(seconds), "p99": percentile(seconds, 0.99), "all": seconds}


def cli(argv: list[str]) -> Callable[[], object]:
    """The ``interlude`` verb ``argv`` as ``interlude`` runs it once its command line is
    parsed (not timed), its output into a buffer."""
    from worker.cli import build_parser
    from worker.cli.output import Output

    args = build_parser().parse_args(argv)

    def call() -> object:
        with contextlib.redirect_stdout(io.StringIO()) as out:
            status = args.handler(args, Output(as_json="--json" in argv))
        if status != 0:
            raise RuntimeError(f"interlude {' '.join(argv)} exited {status}")
        return out

    return call


def inbox(reviewer: str, credential: str, *, empty: bool = False) -> Callable[[], object]:
    """The web inbox's first page for ``reviewer`` signed in, read as the inbox page reads it
    (``empty``: it must hold nothing, else something)."""
    from models.inbox_queries import answerable_interrupts
    from worker.web.auth import authenticated

    actor = authenticated(reviewer, credential)
    if actor is None:
        raise RuntimeError(f"{reviewer} cannot sign in")

    def call() -> object:
        page = answerable_interrupts(actor.roles, actor_id=actor.id, cursor=None, kind=None)
        if bool(page.items) == empty:
            raise RuntimeError(f"the inbox of {reviewer} holds {len(page.items)} interrupts")
        return page

    return call


def interrupts_page() -> object:
    """What ``interlude interrupts list`` reads for its first page, as it reads it: the
    interrupts through the store, and how long their runs have waited."""
    from worker import list_interrupts
    from worker.cli.interrupt_commands import DEFAULT_LIMIT, PENDING
    from worker.ops.waiting import waiting_since

    found = list_interrupts(limit=DEFAULT_LIMIT)
    if len(found) != DEFAULT_LIMIT:
        raise RuntimeError(f"interrupts list read {len(found)} interrupts, not {DEFAULT_LIMIT}")
    return waiting_since({i.run_id for i in found if i.status == PENDING})


def reads(run_id: str, reviewer: str, lead: str, repeat: int) -> dict[str, dict[str, Any]]:
    return {
        "interrupts_list": timed(interrupts_page, repeat),
        "interrupts_list_table": timed(cli(["interrupts", "list"]), repeat),
        "interrupts_list_json": timed(cli(["interrupts", "list", "--json"]), repeat),
        "inbox": timed(inbox(REVIEWER, reviewer), repeat),
        "inbox_empty": timed(inbox(LEAD, lead, empty=True), repeat),
        "runs_show": timed(cli(["runs", "show", run_id]), repeat),
        "runs_show_json": timed(cli(["runs", "show", run_id, "--json"]), repeat),
    }


def due_count(name: str) -> int:
    with psycopg.connect(pg.dsn(name)) as conn:
        row = conn.execute(
            "SELECT count(*) FROM interrupts WHERE status = 'pending' AND deadline <= now()"
        ).fetchone()
    return int(row[0]) if row else 0


def sweep(name: str) -> dict[str, Any]:
    """The sweep of the due interrupts in this process, publishes recorded; timed. A sweep
    starts no batch after one beat interval (beat has sent the next by then): on a machine too
    slow to finish, sweeps follow one another, as beat's would, until one comes back short."""
    from worker.engine.sweeps import SweepReport, sweep_report
    from worker.testing import recording

    due = due_count(name)
    reports: list[SweepReport] = []
    seconds = 0.0
    with recording() as tasks:
        while True:
            started = time.perf_counter()
            report = sweep_report()
            if not report.handled + report.deferred + report.failed:
                break  # (not timed: the sweep beat would send next, finding nothing)
            seconds += time.perf_counter() - started
            reports.append(report)
        published = [t.name for t in tasks.published]
    report = SweepReport(
        *(sum(getattr(r, f) for r in reports) for f in ("handled", "deferred", "failed"))
    )
    with psycopg.connect(pg.dsn(name)) as conn:
        states: dict[str, int] = dict(
            conn.execute(
                "SELECT state, count(*) FROM runs WHERE state <> 'waiting' GROUP BY state"
            ).fetchall()
        )
    return {
        "due": due,
        "seconds": seconds,
        "sweeps": len(reports),
        "handled": report.handled,
        "deferred": report.deferred,
        "failed": report.failed,
        "published": {n: published.count(n) for n in sorted(set(published))},
        "left_due": due_count(name),
        "runs_not_waiting": {str(k): int(v) for k, v in states.items()},
    }


def answer_some(name: str, by_flow: dict[str, list[str]], count: int) -> int:
    """Answer ``count`` bulk runs of each flow (not the sample's) and drive them to success."""
    from bench.scale_flows import ASKS
    from worker import add_actor, list_interrupts, submit_resume
    from worker.testing import recording

    roles = sorted({r for ask in ASKS for r in [*ask.roles, *ask.extra.get("escalate_to", [])]})
    credential = add_actor("scale-checker", roles)
    run_ids = []
    with psycopg.connect(pg.dsn(name)) as conn, recording() as tasks:
        for ask in ASKS:
            rows = conn.execute(
                "SELECT r.id FROM runs r JOIN interrupts i ON i.run_id = r.id "
                "WHERE r.flow_name = %s AND r.state = 'waiting' AND NOT r.id = ANY(%s) "
                "AND i.status = 'pending' AND i.deadline > now() + interval '1 hour' LIMIT %s",
                (ask.flow, by_flow[ask.flow], count),
            ).fetchall()
            for (run_id,) in rows:
                (interrupt,) = list_interrupts(run_id=str(run_id), status="pending")
                answer = {**contract(interrupt), "actor": {"type": "human", "id": "scale-checker"}}
                if ask.kind == "evidence":
                    answer["input"] = {"document_ids": ["doc-1"]}
                elif ask.kind == "budget":
                    answer["input"] = {"units": 5.0}
                else:
                    answer["input"] = {"note": "ok"}
                result = submit_resume(answer, credential)
                if not result.accepted:
                    raise RuntimeError(
                        f"bulk run {run_id} refused: {result.outcome.value} ({result.reason})"
                    )
                run_ids.append(str(run_id))
        tasks.drain()
        done = conn.execute(
            "SELECT count(*) FROM runs WHERE id = ANY(%s) AND state = 'succeeded'", (run_ids,)
        ).fetchone()
    if done is None or done[0] != len(run_ids):
        raise RuntimeError(f"of {len(run_ids)} bulk runs answered, {done} succeeded")
    return len(run_ids)


# --- W1 -------------------------------------------------------------------------------------


class OwnRuns(Poller):
    """``bench.w1``'s poller counting only the runs in ``only``: beside a million others (and the
    sweep's cancelled and expired ones), counting every run would be neither cheap nor right."""

    def __init__(self, dsn: str) -> None:
        super().__init__(dsn)
        self.only: list[str] = []

    def states(self) -> dict[str, int]:
        self.queries += 1
        rows = self.conn.execute(
            "SELECT state, count(*) FROM runs WHERE id = ANY(%s) GROUP BY state", [self.only]
        ).fetchall()
        return {str(state): int(n) for state, n in rows}


def w1(name: str, runs: int, credential: str) -> dict[str, float]:
    """``bench.w1``'s workload on database ``name``, right after a checkpoint: runs/s of
    ``runs`` W1 runs, and the bytes of WAL the server wrote meanwhile per run (where a page's
    first change after a checkpoint writes the whole page, the database's size shows whatever
    the machine's noise).

    As ``bench.w1`` but for what a database full of other waiting runs changes for the bench
    itself: its poller counts the runs it started only (``OwnRuns``), and it resumes their
    interrupts (looked up in one query) rather than the oldest pending approvals, which are
    the bulk's.
    """
    from models.db import dispose_engines
    from worker import enqueue_run, submit_resume

    url = pg.sqlalchemy_url(name)
    configure(url, None)
    redis.Redis.from_url(BROKER_URL).flushdb()
    ready_caller()
    worker = start_worker("worker", bench_env(url), INTERLUDE_QUEUES, ["-c", "1"])
    poller = OwnRuns(pg.dsn(name))
    try:
        poller.conn.execute("CHECKPOINT")
        wal_before = _wal(poller.conn)
        start = time.perf_counter()
        run_ids = [enqueue_run("bench_w1", {"n": i}) for i in range(runs)]
        poller.only = run_ids
        poller.wait_for("waiting", runs)
        rows = poller.conn.execute(
            "SELECT id, run_id, checkpoint_id, scope, evidence_hash FROM interrupts "
            "WHERE run_id = ANY(%s) AND status = 'pending'",
            (run_ids,),
        ).fetchall()
        for row in rows:
            interrupt = SimpleNamespace(
                id=row[0], run_id=row[1], checkpoint_id=row[2], scope=row[3], evidence_hash=row[4]
            )
            result = submit_resume(contract(interrupt), credential)
            if not result.accepted:
                raise RuntimeError(f"resume refused: {result.outcome.value} ({result.reason})")
        poller.wait_for("succeeded", runs)
        seconds = time.perf_counter() - start
        wal_bytes = _wal(poller.conn) - wal_before
    finally:
        stop_worker(worker)
        poller.close()
        dispose_engines()
    return {"rate": runs / seconds, "wal_bytes": wal_bytes / runs}


def _wal(conn: psycopg.Connection[Any]) -> float:
    """Where the server's WAL ends, in bytes: the whole server's (the bench is alone on it;
    ``pg_stat_wal`` would lag, its counts reported by each backend when it gets to it)."""
    found = conn.execute("SELECT pg_current_wal_lsn() - '0/0'::pg_lsn").fetchone()
    assert found is not None
    return float(found[0])


def w1_rounds(
    full: str, full_credential: str, runs: int, rounds: int
) -> dict[str, list[dict[str, float]]]:
    """W1 on the full database and on a fresh empty one, in turn."""

    found: dict[str, list[dict[str, float]]] = {"full": [], "empty": []}
    for _ in range(rounds):
        found["full"].append(w1(full, runs, full_credential))
        with pg.scratch_database("interlude_scale_empty") as empty:
            url = pg.sqlalchemy_url(empty)
            credential = prepare(url)
            found["empty"].append(w1(empty, runs, credential))
    return found


# --- the whole ------------------------------------------------------------------------------


def run(
    runs: int,
    sample_size: int,
    repeat: int,
    check: int,
    w1_runs: int,
    rounds: int,
    due_policy: str | None = None,
    grouped: bool = False,
) -> dict[str, Any]:
    from models.db import dispose_engines, utcnow
    from models.migrate import upgrade
    from worker import add_actor

    result: dict[str, Any] = {
        "runs": runs,
        "sample": sample_size,
        "due": DUE,
        "due_policy": due_policy or "mix",
        "grouped": grouped,
    }
    with pg.scratch_database("interlude_scale") as name:
        url = pg.sqlalchemy_url(name)
        try:
            use(url)
            upgrade(url)
            for actor in STARTERS:
                add_actor(actor, ["requester"])
            reviewer = add_actor(REVIEWER, REVIEWER_ROLES)
            held = {actor: add_actor(actor, roles) for actor, roles in HOLDERS.items()}
            w1_credential = add_actor(ACTOR, ["bench-approver"])
            started = time.perf_counter()
            by_flow = sample(sample_size)
            result["sample_seconds"] = time.perf_counter() - started
            tpls = templates(url, by_flow)
            # The sample's runs count among the total; their deadlines are days away.
            spread = Spread(
                total=runs - sample_size,
                due=DUE,
                now=utcnow(),
                due_template=_due_template(due_policy),
                grouped=grouped,
            )
            filled = fill(name, tpls, spread)
            result.update({k: v for k, v in filled.items() if k != "picked"})
            check_copies(url, tpls, filled["picked"])
            result["sizes"] = sizes(name, runs)
            result["reads_ms"] = reads(filled["last_run"], reviewer, held[LEAD], repeat)
            result["sweep"] = sweep(name)
            result["answered"] = answer_some(name, by_flow, check)
            dispose_engines()
            result["w1"] = w1_rounds(name, w1_credential, w1_runs, rounds)
        finally:
            dispose_engines()
    return result


def _due_template(policy: str | None) -> int | None:
    """The template (``bench.scale_flows.ASKS``' order, one flow per expiry policy) whose
    expiry policy is ``policy``."""
    from bench.scale_flows import ASKS

    if policy is None:
        return None
    return next(t for t, ask in enumerate(ASKS) if ask.on_expiry == policy)


def report(result: dict[str, Any]) -> str:
    size = result["sizes"]
    reads_ms = result["reads_ms"]
    sweep_ = result["sweep"]
    w1_ = result["w1"]
    full, empty = (statistics.median(r["rate"] for r in w1_[k]) for k in ("full", "empty"))
    wal = {k: statistics.median(r["wal_bytes"] for r in w1_[k]) / 1024 for k in w1_}
    lines = [
        f"bench.scale: {result['runs']:,} waiting runs ({result['sample']} through the engine, "
        f"the rest copied in {result['insert_seconds']:.0f} s, VACUUM ANALYZE and CHECKPOINT "
        f"{result['vacuum_seconds']:.0f} s)",
        f"  bytes per waiting run: {size['per_run']:,.0f} "
        f"({size['total'] / 1e9:.2f} GB in all; table and TOAST / indexes per run:)",
    ]
    for table, s in size["tables"].items():
        lines.append(
            f"    {table:12s} {s['table'] / result['runs']:7,.0f} / "
            f"{s['indexes'] / result['runs']:5,.0f}"
        )
    lines.append(f"  reads, ms (median / p99 of {len(reads_ms['inbox']['all'])}):")
    for key, label in (
        ("interrupts_list", "interrupts list: its reads (first page, 200)"),
        ("interrupts_list_table", "interrupts list: the verb, printing a table"),
        ("interrupts_list_json", "interrupts list: the verb, printing --json"),
        ("inbox", f"inbox first page ({REVIEWER}, roles {', '.join(REVIEWER_ROLES)})"),
        ("inbox_empty", f"inbox, empty ({LEAD}, roles {', '.join(HOLDERS[LEAD])})"),
        ("runs_show", "runs show: the verb, printing a table"),
        ("runs_show_json", "runs show: the verb, printing --json"),
    ):
        lines.append(
            f"    {label:48s} {reads_ms[key]['median']:7.1f} / {reads_ms[key]['p99']:7.1f}"
        )
    lines.append(
        f"  sweep of {sweep_['due']} due ({result['due_policy']}): "
        f"{sweep_['seconds']:.2f} s ({sweep_['sweeps']} sweep(s)); "
        f"handled {sweep_['handled']}, "
        f"deferred {sweep_['deferred']}, failed {sweep_['failed']}, due after it "
        f"{sweep_['left_due']}; published {sweep_['published']}; runs {sweep_['runs_not_waiting']}"
    )
    lines.append(f"  {result['answered']} bulk runs answered through submit_resume and finished")
    lines.append(
        f"  W1 runs/s: {full:.1f} with them waiting, {empty:.1f} on an empty database "
        f"(x{full / empty:.2f}); rounds "
        + " / ".join(", ".join(f"{r['rate']:.1f}" for r in w1_[k]) for k in ("full", "empty"))
    )
    lines.append(
        f"  W1's WAL per run after a checkpoint: {wal['full']:.1f} KB with them waiting, "
        f"{wal['empty']:.1f} KB on an empty database"
    )
    verdicts = [
        ("interrupts list", reads_ms["interrupts_list"]["median"] <= TARGETS_MS["interrupts_list"]),
        (
            "inbox",
            max(reads_ms[k]["median"] for k in ("inbox", "inbox_empty")) <= TARGETS_MS["inbox"],
        ),
        ("sweep", sweep_["seconds"] <= SWEEP_TARGET_SECONDS and sweep_["handled"] == sweep_["due"]),
        ("W1", full >= W1_TARGET * empty),
    ]
    lines.append("  targets: " + ", ".join(f"{k} {'PASS' if ok else 'FAIL'}" for k, ok in verdicts))
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=1_000_000, help="waiting runs in all")
    parser.add_argument("--sample", type=int, default=40, help="of them through the engine")
    parser.add_argument("--repeat", type=int, default=20, help="timed calls of each read")
    parser.add_argument("--check", type=int, default=3, help="bulk runs per flow answered")
    parser.add_argument("--w1-runs", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=5, help="W1 on each database, in turn")
    parser.add_argument(
        "--due-policy",
        choices=[policy.value for policy in ExpiryPolicy],
        help="every due interrupt of this expiry policy (default: a quarter of each)",
    )
    parser.add_argument(
        "--grouped",
        action="store_true",
        help="each flow's waiting runs asked in a block, the inbox's role the youngest",
    )
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    if args.sample < 4 or args.runs < args.sample + DUE + 1:
        parser.error(f"--sample must be at least 4 and --runs more than --sample + {DUE}")
    if min(args.repeat, args.w1_runs, args.rounds) < 1 or args.check < 0:
        parser.error("--repeat, --w1-runs and --rounds must be at least 1, --check at least 0")
    result = run(
        args.runs,
        args.sample,
        args.repeat,
        args.check,
        args.w1_runs,
        args.rounds,
        args.due_policy,
        args.grouped,
    )
    print(json.dumps(result, default=str) if args.json else report(result))


if __name__ == "__main__":
    with exclusive("bench.scale"):
        main()
