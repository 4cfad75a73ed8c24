"""Writes ``docs/reference/sql.md``: every named statement, as PostgreSQL and SQLite get it.

    .venv/bin/python -m models.sql_reference          # write the page
    .venv/bin/python -m models.sql_reference --check  # exit 1 if the page is stale

Each statement of the registry (``models.statements.STATEMENTS``) is built by its own builder
with each dialect's strategy (``models.dialects``) in the shapes it declares, and compiled by
SQLAlchemy's own dialects with its parameters as named binds (``:name``), no values inlined.
A unit test (``tests/unit/test_sql_reference.py``) fails when the committed page differs.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import re
import sys
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

from sqlalchemy import Select
from sqlalchemy.engine import Dialect as SQLDialect

from models.dialects import Dialect, SQLiteDialect
from models.statements import ALONE, STATEMENTS, Statement, Write

# The modules that register the engine's statements (a test checks that none is missing).
STORES = (
    "models.runs",
    "models.events",
    "models.checkpoints",
    "models.claims",
    "models.recovery",
    "models.endings",
    "models.successors",
    "models.interrupts",
    "models.attempts",
    "models.effects",
    "models.actors",
    "models.fencing",
    "models.mailbox",
    "models.links",
    "models.notifications",
)
PAGE = Path(__file__).resolve().parents[1] / "docs" / "reference" / "sql.md"
REFRESH = "python -m models.sql_reference"
FAMILIES = {
    "run": "Runs",
    "checkpoint": "Checkpoints",
    "event": "Events (the audit trail)",
    "interrupt": "Interrupts",
    "attempt": "Resume attempts",
    "link": "Answer links",
    "notification": "Notifications (the outbox)",
    "actor": "Actors",
    "effect": "Effects (the ledger)",
    "mailbox": "Kept events (a run's mailbox)",
}
EVENT_COLUMNS = (("run_id", "at", "actor"), ("trigger", "from_state", "to_state", "detail"))
SUSPEND = ("lease_expires_at", "lease_owner", "state", "state_version", "updated_at")
RESUME = ("dispatched_at", "state", "state_version", "updated_at")
RESOLVE = (("pending",), ("decision", "resolved_at", "resolved_by", "resume_input", "status"))
ACCEPTED = (
    "actor_id",
    "at",
    "idempotency_key",
    "interrupt_id",
    "original_key",
    "outcome",
    "payload",
    "payload_hash",
    "reason",
    "run_id",
)
COMPLETE = (
    "budget_consumed",
    "checkpoint_seq",
    "error",
    "finished_at",
    "lease_expires_at",
    "lease_owner",
    "lost_leases",
    "next_step",
    "output",
    "state",
    "state_version",
    "step_attempts",
    "step_executions",
    "updated_at",
)
# What one W1 run (start, one approval, resume, a final step with one effect) sends on
# PostgreSQL as one statement each, besides the claims and the gateway's read: the main
# write, the writes riding along it, the write chained at the end (if any) and the query the
# main write is guarded on (if any); the shapes are those W1 sends.
Part = tuple[str, tuple[Any, ...]]
W1_COMPOSED: tuple[tuple[str, Part, list[Part], Part | None, Part | None], ...] = (
    (
        "`enqueue_run`: the run, its checkpoint 0, its `enqueue` event",
        ("run.insert", ()),
        [("checkpoint.insert", ()), ("event.insert", EVENT_COLUMNS)],
        None,
        None,
    ),
    (
        "a step that asks: the run's `suspend`, its event, the interrupt",
        ("run.move", (True, SUSPEND)),
        [("event.insert", EVENT_COLUMNS), ("interrupt.insert", ())],
        None,
        None,
    ),
    (
        "an answer accepted at once: guarded on the interrupt still pending and its actor"
        " unchanged, the run's move, its event, the interrupt resolved, then the attempt",
        ("run.move", (False, RESUME)),
        [("event.insert", EVENT_COLUMNS), ("interrupt.move", RESOLVE)],
        ("attempt.insert", (ACCEPTED,)),
        ("interrupt.answerable", ()),
    ),
    (
        "`ctx.effect` a third of a lease after the claim: the intent, with the lease renewal",
        ("effect.intent", ()),
        [("run.renew_lease", ())],
        None,
        None,
    ),
    (
        "a step's last commit: the run's `complete`, its events, the checkpoint, the outcome",
        ("run.move", (True, COMPLETE)),
        [("event.insert", EVENT_COLUMNS), ("checkpoint.insert", ()), ("effect.outcome", ())],
        None,
        None,
    ),
)
# Each strategy, with the SQLAlchemy dialect that compiles for it (named binds, readable).
TARGETS: tuple[tuple[str, Dialect, SQLDialect], ...] = tuple(
    (title, strategy, strategy.compiler())
    for title, strategy in (("PostgreSQL", Dialect()), ("SQLite", SQLiteDialect()))
)


def load_statements() -> list[Statement]:
    """Every statement of the engine: the stores' modules imported, their registry read."""
    for module in STORES:
        importlib.import_module(module)
    return list(STATEMENTS)


def built(statement: Statement, strategy: Dialect, shape: tuple[Any, ...]) -> Any:
    """``statement`` in ``shape`` as ``strategy`` builds it (a write as it is sent alone)."""
    if statement.ride:
        return statement.build(strategy, ALONE, None, *shape)
    return statement.build(strategy, *shape)


def compiled(statement: Any, dialect: SQLDialect) -> tuple[str, dict[str, Any]]:
    """The SQL text of ``statement`` for ``dialect``, and the values it binds on its own (the
    constants of the statement: states, kinds), by name. A list of constants is spelled out
    as ``models.driver`` sends it (``:name_1, :name_2``); a list given at execution stays one
    bind (``:name``), expanded then."""
    result = statement.compile(dialect=dialect)
    sql: str = result.string
    fixed: dict[str, Any] = {}
    for bind, name in result.bind_names.items():
        if bind.expanding:
            if bind.required:
                spelled = f":{name}"
            else:
                names = [f"{name}_{i}" for i, _ in enumerate(bind.value, 1)]
                fixed.update(zip(names, map(_shown, bind.value), strict=True))
                spelled = ", ".join(f":{each}" for each in names)
            sql = sql.replace(f"__[POSTCOMPILE_{name}]", spelled)
        elif not bind.required and bind.value is not None:
            fixed[name] = _shown(bind.value)
    return sql.strip(), fixed


def _shown(value: Any) -> Any:
    if isinstance(value, Enum):
        return value.value
    return value


def _shape_text(statement: Statement, shape: tuple[Any, ...]) -> str:
    skip = 3 if statement.ride else 1
    names = list(inspect.signature(statement.build).parameters)[skip:]
    return ", ".join(f"{name}={value!r}" for name, value in zip(names, shape, strict=True))


def _sql_block(sql: str, fixed: dict[str, Any]) -> Iterator[str]:
    yield "```sql"
    yield sql
    yield "```"
    if fixed:
        values = ", ".join(f"`{name}` = `{value!r}`" for name, value in sorted(fixed.items()))
        yield ""
        yield f"Bound by the statement itself: {values}."
    yield ""


def _statement_section(statement: Statement) -> Iterator[str]:
    yield f"### `{statement.name}`"
    yield ""
    yield statement.doc
    yield ""
    kind = "a statement"
    if statement.ride:
        kind = "a write that may ride along another statement"
        if isinstance(built(statement, TARGETS[0][1], statement.shapes[0]), Select):
            kind = "a query that may head another statement, which is guarded on its rows"
    yield f"Built by `{statement.module}.{statement.build.__name__}`, {kind}."
    yield ""
    for shape in statement.shapes:
        if shape:
            yield f"Shape: {_shape_text(statement, shape)}"
            yield ""
        for title, strategy, dialect in TARGETS:
            if statement.only is not None and strategy.name != statement.only:
                only = next(t for t, d, _ in TARGETS if d.name == statement.only)
                yield f"**{title}**: not sent ({only} only)."
                yield ""
                continue
            yield f"**{title}**"
            yield ""
            yield from _sql_block(*compiled(built(statement, strategy, shape), dialect))


def _composed_section() -> Iterator[str]:
    yield "## Sent together on PostgreSQL: what one W1 run writes"
    yield ""
    yield (
        "On PostgreSQL the writes of one transaction go as one statement: the first write, and"
        " the others as data-modifying CTEs guarded on its rows (`Dialect.execute_with`,"
        " `execute_chain`), so a compare-and-set that matches nothing writes nothing at all."
        " Parameters are renamed per part (`g_`, `m_`, `w0_`, `w1_`..., `t_`). On SQLite the same"
        " writes go one by one, in order, in one transaction."
    )
    yield ""
    strategy, dialect = TARGETS[0][1], TARGETS[0][2]
    for title, main, writes, then, given in W1_COMPOSED:
        yield f"### {title}"
        yield ""
        parts = [
            *([given[0]] if given else []),
            main[0],
            *(w[0] for w in writes),
            *([then[0]] if then else []),
        ]
        yield "Of: " + ", ".join(f"`{name}`" for name in parts) + "."
        yield ""
        statement = strategy.compose(
            _write(*main),
            [_write(*w) for w in writes],
            _write(*then) if then else None,
            _write(*given) if given else None,
        )
        yield from _sql_block(*compiled(statement, dialect))


def _write(name: str, shape: tuple[Any, ...]) -> Write:
    return Write(STATEMENTS[name], shape)


def render() -> str:
    """The page, as ``docs/reference/sql.md`` holds it."""
    statements = load_statements()
    lines = [
        "# SQL reference",
        "",
        f"<!-- Generated by `{REFRESH}` from the statement registry; do not edit. -->",
        "",
        "Every statement the engine's stores send has a name (`family.verb`) and a builder,"
        " registered in `models.statements.STATEMENTS`; the name and the statement's shape"
        " (what varies in its text, such as the columns a move sets) are the key it is built"
        " and kept under, once per process. Below, each one as SQLAlchemy compiles it for"
        " PostgreSQL and for SQLite, parameters as named binds (`:name`) and no values inlined."
        " A write is shown as it is sent alone (its parameters prefixed `s_`); riding along"
        " another statement, its prefix is that statement's (see the last section).",
        "",
        "On PostgreSQL the statements executed through `Dialect.run` and every write"
        " (`Dialect.execute`, `execute_with`, `execute_chain`) are sent on psycopg directly"
        " (`models.driver`), compiled once from this same statement: the text is the one"
        " below with `%(name)s` for `:name`. The others go through SQLAlchemy's session.",
        "",
        "Not named here: what the ORM sends for `session.get` (a run, a checkpoint, an"
        " interrupt by id) and `session.add` (a superseding or re-asked interrupt, a kept"
        " event), and the"
        " operators' listings and statistics (`models.queries`, `models.operator_queries`,"
        " `models.inbox_queries`, `models.retention`), an operator's fork (`models.forks`)"
        " and actor administration"
        " (`models.actors`), which are not the engine's.",
        "",
        f"Refresh after changing a statement: `{REFRESH}` (a unit test fails while this page"
        " is stale).",
        "",
        "| name | what it does, and who sends it |",
        "| --- | --- |",
    ]
    for statement in statements:
        anchor = statement.name.replace(".", "")
        lines.append(f"| [`{statement.name}`](#{anchor}) | {statement.doc} |")
    lines.append("")
    for family, title in FAMILIES.items():
        members = [s for s in statements if s.name.split(".")[0] == family]
        if not members:
            continue
        lines += [f"## {title}", ""]
        for statement in members:
            lines += list(_statement_section(statement))
    lines += list(_composed_section())
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write docs/reference/sql.md.")
    parser.add_argument("--check", action="store_true", help="exit 1 if the page is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != page:
            print(f"{PAGE} is stale: run {REFRESH}", file=sys.stderr)
            return 1
        return 0
    PAGE.parent.mkdir(parents=True, exist_ok=True)
    PAGE.write_text(page)
    print(f"wrote {PAGE} ({len(statements_of(page))} statements)")
    return 0


def statements_of(page: str) -> list[str]:
    """The statement names a page has a section for."""
    return re.findall(r"^### `(\w+\.\w+)`$", page, flags=re.MULTILINE)


if __name__ == "__main__":
    sys.exit(main())
