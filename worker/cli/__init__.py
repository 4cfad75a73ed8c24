"""The ``interlude`` command: operators inspect, resume, cancel and pause runs.

Each verb calls the Python API in ``worker``; this package only parses, prints and maps
failures to exit statuses (see ``worker.cli.exits``). Nothing heavy (SQLAlchemy, Celery,
pydantic, rich) is imported before a verb needs it, so ``--help`` answers at once.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from models.errors import InterludeError
from worker.cli.actor_commands import register as register_actors
from worker.cli.bulk_commands import register as register_bulk
from worker.cli.event_commands import register as register_events
from worker.cli.exits import EPILOG, FAILURE, INTERRUPTED, RESUME_EXIT, CliError, status_of
from worker.cli.flow_commands import register as register_flows
from worker.cli.interrupt_commands import register as register_interrupts
from worker.cli.link_commands import register as register_links
from worker.cli.ops_commands import register as register_ops
from worker.cli.output import Output, error, note, set_json_errors
from worker.cli.parser import (
    JSON_FLAG,
    WIDE_FLAG,
    Parser,
    Subparsers,
    common_options,
    wants_json,
)
from worker.cli.purge import register as register_purge
from worker.cli.resume import register as register_resume
from worker.cli.run_commands import register as register_runs
from worker.cli.serve import register as register_serve
from worker.ops.runlog import install_stderr
from worker.startup import project_on_path

__all__ = ["RESUME_EXIT", "build_parser", "main"]

# After the resume refusals (10-18), in order; every verb can be stopped with Ctrl-C.
HELP_INTERRUPTED = f"  {INTERRUPTED:<3} interrupted (Ctrl-C)\n"


class _Version(argparse.Action):
    """``--version``, read from the installed distribution only when asked."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, help="print the version and exit")

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        from importlib.metadata import PackageNotFoundError, version

        try:
            number = version("interlude")
        except PackageNotFoundError:
            number = "unknown (not installed)"
        sys.stdout.write(f"interlude {number}\n")
        parser.exit(0)


def build_parser() -> Parser:
    parser = Parser(
        prog="interlude",
        description=(
            "Durable interrupt-and-resume for agent runs on Celery: the operators' command.\n"
            "Every verb has --help; every listing and result also prints as JSON with --json,\n"
            "given before or after the verb."
        ),
        epilog=EPILOG + HELP_INTERRUPTED,
    )
    parser.add_argument("--version", action=_Version)
    parser.add_argument(JSON_FLAG, action="store_true", help="print JSON (also after the verb)")
    parser.add_argument(WIDE_FLAG, action="store_true", help="full ids and details in tables")
    sub: Subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_options()
    for register in (
        register_runs,
        register_interrupts,
        register_resume,
        register_bulk,
        register_events,
        register_actors,
        register_links,
        register_ops,
        register_purge,
        register_flows,
        register_serve,
    ):
        register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    as_json = wants_json(argv)
    set_json_errors(as_json)
    project_on_path()
    install_stderr()
    try:
        args = build_parser().parse_args(argv)
        out = Output(as_json=as_json, wide=getattr(args, "wide", False))
        _say_which_database(args.command)
        status: int = args.handler(args, out)
        return status
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else FAILURE
    except CliError as exc:
        return error(str(exc), exc.status)
    except InterludeError as exc:
        return error(str(exc), status_of(exc))
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``interlude runs list | head``): not worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return FAILURE
    except Exception as exc:
        described = _database_error(exc)
        if described is None:
            raise
        return error(described, FAILURE)


def _say_which_database(command: str) -> None:
    """With INTERLUDE_DATABASE_URL unset, a line on stderr says that the embedded database in
    this folder is used, and where: an operator who forgot to set it (or `db upgrade` run in
    the wrong shell) would otherwise work on another database than the workers' unknowingly."""
    if command == "demo":
        return  # it sets up a database of its own
    from models.settings import get_settings

    embedded = get_settings().embedded_notice()
    if embedded is not None:
        note(f"interlude: {embedded}")


def _database_error(exc: Exception) -> str | None:
    # SQLAlchemy is imported only by verbs that reach the database; if it is not loaded,
    # this cannot be one of its errors.
    if "sqlalchemy" not in sys.modules:
        return None
    from models.db_errors import describe

    return describe(exc)
