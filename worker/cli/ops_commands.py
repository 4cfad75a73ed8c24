"""Operations: ``db``, ``sweep``, ``reap``, ``stats``, ``metrics`` and ``demo``.

Sweeps, the reaper, statistics and the demo live in their own modules; they are imported
only when their verb runs, so ``--help`` and the other verbs never depend on them.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Callable
from typing import Any

from worker.cli.exits import FAILURE, OK, CliError
from worker.cli.output import Output, flatten, note
from worker.cli.parser import Parser, Subparsers, group, name_text, port, verb
from worker.present.formats import compact, format_age, jsonable

# The demo stories: where each is told.
DEMOS = {
    "procurement": ("worker.cli.demo", "run_demo"),
    "agent": ("worker.cli.demo_agent", "run_agent_demo"),
}


def register(sub: Subparsers, common: Parser) -> None:
    db = group(sub, "db", "the database schema")
    verb(db, "upgrade", _upgrade, "migrate the database to the newest schema", common)
    verb(db, "current", _current, "the revision the database is at, and the newest one", common)
    verb(db, "history", _history, "the schema revisions this interlude ships, newest first", common)
    verb(
        db,
        "check",
        _check,
        "exit 0 when the schema is up to date, 1 when it is behind (run db upgrade)",
        common,
    )
    verb(sub, "sweep", _sweep, "apply the expiry policy of every due interrupt, once", common)
    verb(sub, "reap", _reap, "requeue runs of dead workers and republish lost dispatches", common)
    verb(sub, "stats", _stats, "waiting runs, resume outcomes and repeated work", common)
    metrics = verb(
        sub,
        "metrics",
        _metrics,
        "serve the statistics as Prometheus metrics (blocks), or print them once (--once)",
    )
    served = metrics.add_mutually_exclusive_group(required=True)
    served.add_argument("--port", metavar="P", type=port, help="the port to listen on")
    served.add_argument(
        "--once",
        action="store_true",
        help="print the metrics once, in Prometheus' text format, and exit (a scrape without "
        "a server: cron, a healthcheck, a look at a glance)",
    )
    metrics.add_argument(
        "--host",
        metavar="H",
        type=name_text,
        help="the address to listen on (default INTERLUDE_METRICS_HOST, else 127.0.0.1; "
        "0.0.0.0: every interface, as in a container)",
    )
    demo = verb(
        sub,
        "demo",
        _demo,
        "run a story end to end on the embedded default and narrate it",
        description="Run a story end to end on the embedded default (SQLite and a filesystem "
        "broker in .interlude/demo, one real worker) and narrate it: procurement (a purchase "
        "request waits for an engineering certificate) or agent (a support agent proposes "
        "refunds; people approve, edit or reject each call).",
    )
    demo.add_argument(
        "story",
        nargs="?",
        choices=sorted(DEMOS),
        default="procurement",
        help="which story (default: procurement)",
    )


def _database() -> str:
    from sqlalchemy.engine import make_url

    from models.settings import get_settings

    # The URL may hold a password.
    return make_url(get_settings().database_url).render_as_string(hide_password=True)


def _upgrade(args: argparse.Namespace, out: Output) -> int:
    from models.migrate import current_head, upgrade

    upgrade()
    head = current_head()
    where = _database()
    if out.as_json:
        out.json({"revision": head, "database": where})
    else:
        out.line(f"database {where} is at revision {head}")
    return OK


def _current(args: argparse.Namespace, out: Output) -> int:
    from models.migrate import schema_status

    status = schema_status()
    where = _database()
    if out.as_json:
        out.json(
            {
                "revision": status.current,
                "head": status.head,
                "up_to_date": status.up_to_date,
                "database": where,
            }
        )
    else:
        out.line(
            f"database {where} is at revision {status.current or 'none (no schema)'}"
            f"{' (newest)' if status.up_to_date else f'; the newest is {status.head}'}"
        )
    return OK


def _history(args: argparse.Namespace, out: Output) -> int:
    from models.migrate import history

    revisions = history()
    if out.as_json:
        out.json([vars(r) for r in revisions])
        return OK
    out.table(
        ["revision", "after", "what"],
        [(r.id, r.down_revision or "-", r.message) for r in revisions],
        title=f"schema revisions ({len(revisions)}), newest first",
    )
    return OK


def _check(args: argparse.Namespace, out: Output) -> int:
    from models.migrate import schema_status

    status = schema_status()
    if out.as_json:
        out.json({"revision": status.current, "head": status.head, "up_to_date": status.up_to_date})
    if status.up_to_date:
        if not out.as_json:
            out.line(f"schema up to date (revision {status.head})")
        return OK
    found = f"at revision {status.current}" if status.current else "has no interlude schema"
    raise CliError(
        f"the database {found}; this interlude needs {status.head}: run `interlude db upgrade`",
        FAILURE,
    )


def _sweep(args: argparse.Namespace, out: Output) -> int:
    # Run by an operator, typically after fixing what made the sweeps put rows off: those
    # are looked at now too.
    sweep = _function("worker.engine.sweeps", "sweep_report", "sweep")
    report = sweep(bring_forward=True)
    # What was left undone is said only when there is some, next to what was handled.
    left = {
        "deferred": (report.deferred, "deferred, still pending (see the warnings)"),
        "failed": (report.failed, "failed, still pending (see the errors)"),
        "not_notified": (report.not_notified, "escalations not notified (flow not loaded here)"),
        "not_published": (report.not_published, "resumes not published (left to the reaper)"),
    }
    if out.as_json:
        out.json({"handled": report.handled, **{k: n for k, (n, _) in left.items() if n}})
        return OK
    said = [f"{n} {what}" for n, what in left.values() if n]
    out.line("; ".join([f"{report.handled} expired interrupts handled", *said]))
    return OK


def _reap(args: argparse.Namespace, out: Output) -> int:
    result = _call("worker.engine.reaper", "reap", "reap")
    _result(out, "handled", result, "runs requeued or republished")
    return OK


def _stats(args: argparse.Namespace, out: Output) -> int:
    stats = _call("worker.ops.stats", "collect_stats", "stats")
    data = jsonable(stats)
    if out.as_json:
        out.json(data)
        return OK
    # Rendered generically: the statistics' fields belong to worker.ops.stats.
    out.table(["figure", "value"], figures(data), title="stats")
    return OK


def _metrics(args: argparse.Namespace, out: Output) -> int:
    from models.settings import get_settings

    if args.once:
        text = _function("worker.ops.stats", "metrics_text", "metrics")
        sys.stdout.write(text())  # many lines, ours: as Prometheus reads them
        return OK

    serve = _function("worker.ops.stats", "serve_metrics", "metrics")
    host = args.host if args.host is not None else get_settings().metrics_host
    where = f"[{host}]:{args.port}" if ":" in host else f"{host}:{args.port}"
    # Announced once bound: a host that does not resolve or a port in use is one line naming
    # both, never "serving" first.
    try:
        serve(
            args.port,
            host,
            on_ready=lambda: note(
                f"serving Prometheus metrics on {where} at /metrics (Ctrl-C stops)"
            ),
        )
    except KeyboardInterrupt:
        return OK  # Ctrl-C is how a foreground exporter is meant to stop
    except OSError as exc:
        raise CliError(f"cannot serve on {where}: {exc.strerror or exc}", FAILURE) from None
    return OK


def _demo(args: argparse.Namespace, out: Output) -> int:
    module, function = DEMOS[args.story]
    status = _call(module, function, "demo")
    return int(status) if isinstance(status, int) else OK


def _function(module: str, name: str, verb_name: str) -> Callable[..., Any]:
    try:
        found: Callable[..., Any] = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise CliError(
            f"interlude {verb_name} is not available in this installation ({exc})", FAILURE
        ) from None
    return found


def _call(module: str, name: str, verb_name: str) -> Any:
    function = _function(module, name, verb_name)
    try:
        return function()
    except NotImplementedError as exc:
        raise CliError(f"interlude {verb_name} is not available yet: {exc}", FAILURE) from None


def _result(out: Output, key: str, result: Any, label: str) -> None:
    """An int is a count; anything richer (a model, a mapping) is shown field by field."""
    data = jsonable(result)
    if out.as_json:
        out.json({key: data} if not isinstance(data, dict) else data)
    elif isinstance(data, dict):
        out.table(["figure", "value"], figures(data))
    else:
        out.line(f"{data} {label}")


def figures(data: Any) -> list[tuple[str, str]]:
    """Every field of a result of unknown shape as a (name, value) row, values for people."""
    rows = []
    for key, value in flatten(data):
        # Ages are easier to read as 3h12m than as 11520.0 seconds, rates as percentages.
        if isinstance(value, int | float) and not isinstance(value, bool):
            if "age" in key:
                rows.append((key.removesuffix("_seconds"), format_age(value)))
                continue
            if "rate" in key:
                rows.append((key, f"{value:.1%}"))
                continue
        rows.append((key, value if isinstance(value, str) else compact(value)))
    return rows
