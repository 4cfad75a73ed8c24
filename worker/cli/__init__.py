"""The ``interlude`` command: operators inspect, resume, cancel and pause runs.

Each verb calls the Python API in ``worker``; this package only parses, prints and maps
failures to exit statuses (see ``worker.cli.exits``).
"""

from __future__ import annotations

import os
import sys

from sqlalchemy.exc import SQLAlchemyError

from models.errors import InterludeError
from worker.cli.actors import register as register_actors
from worker.cli.exits import EPILOG, FAILURE, INTERRUPTED, RESUME_EXIT, CliError, status_of
from worker.cli.flows import register as register_flows
from worker.cli.interrupts import register as register_interrupts
from worker.cli.ops import register as register_ops
from worker.cli.output import Output, error
from worker.cli.parser import Parser, Subparsers, common_options
from worker.cli.resume import register as register_resume
from worker.cli.runs import register as register_runs
from worker.cli.serve import register as register_serve

__all__ = ["RESUME_EXIT", "build_parser", "main"]


def build_parser() -> Parser:
    parser = Parser(
        prog="interlude",
        description=(
            "Durable interrupt-and-resume for agent runs on Celery: the operators' command.\n"
            "Every verb has --help; every listing and result also prints as JSON with --json."
        ),
        epilog=EPILOG,
    )
    sub: Subparsers = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    common = common_options()
    for register in (
        register_runs,
        register_interrupts,
        register_resume,
        register_actors,
        register_ops,
        register_flows,
        register_serve,
    ):
        register(sub, common)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one command and return its exit status."""
    _project_on_path()
    try:
        args = build_parser().parse_args(argv)
        status: int = args.handler(args, Output(as_json=getattr(args, "json", False)))
        return status
    except SystemExit as exc:  # --help, --version
        return exc.code if isinstance(exc.code, int) else FAILURE
    except CliError as exc:
        error(str(exc))
        return exc.status
    except InterludeError as exc:
        error(str(exc))
        return status_of(exc)
    except SQLAlchemyError as exc:
        error(f"database error: {_first_line(exc)}")
        return FAILURE
    except KeyboardInterrupt:
        return INTERRUPTED
    except BrokenPipeError:
        # The reader went away (``interlude runs list | head``): not worth a traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return FAILURE


def _project_on_path() -> None:
    # INTERLUDE_FLOWS names modules of the project the command runs in, as ``celery -A`` does.
    cwd = os.getcwd()
    if cwd not in sys.path and "" not in sys.path:
        sys.path.insert(0, cwd)


def _first_line(exc: SQLAlchemyError) -> str:
    original = getattr(exc, "orig", None)
    text = str(original if original is not None else exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
