"""argparse, made to fail with one line and to give every verb ``--help`` and ``--json``."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import NoReturn, TypeAlias

from worker.cli.exits import BAD_INPUT, CliError
from worker.cli.output import Output

Handler = Callable[[argparse.Namespace, Output], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr with status 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", argparse.RawDescriptionHelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        raise CliError(f"{self.prog}: {message} (see {self.prog} --help)", BAD_INPUT)


def common_options() -> Parser:
    common = Parser(add_help=False)
    common.add_argument(
        "--json", action="store_true", help="print JSON on stdout (and nothing else)"
    )
    return common


def verb(
    sub: Subparsers,
    name: str,
    handler: Handler,
    help: str,
    *parents: Parser,
    description: str | None = None,
) -> argparse.ArgumentParser:
    parser: argparse.ArgumentParser = sub.add_parser(
        name, help=help, description=description or help, parents=list(parents)
    )
    parser.set_defaults(handler=handler)
    return parser


def group(sub: Subparsers, name: str, help: str) -> Subparsers:
    parser = sub.add_parser(name, help=help, description=help)
    nested: Subparsers = parser.add_subparsers(
        dest=f"{name}_command", required=True, metavar="VERB"
    )
    return nested


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r} must be at least 1")
    return value


def positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} must be a positive number")
    return value
