"""argparse, made to fail with one line and to give every verb ``--help`` and ``--json``."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, NoReturn, TypeAlias

from worker.cli.exits import BAD_INPUT, CliError

if TYPE_CHECKING:
    from worker.cli.output import Output

Handler = Callable[[argparse.Namespace, "Output"], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"

PROG = "interlude"
JSON_FLAG = "--json"
WIDE_FLAG = "--wide"


class HelpFormatter(argparse.RawDescriptionHelpFormatter):
    """Descriptions as written; an option's default shown when it has a meaningful one."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            action.option_strings
            and "%(default)" not in text
            and default not in (None, False, argparse.SUPPRESS)
        ):
            text += " (default: %(default)s)"
        return text


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr with status 2."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def error(self, message: str) -> NoReturn:
        # ``interlude: error:`` is printed once, by the caller; the verb says where it went wrong.
        where = self.prog.removeprefix(PROG).strip()
        prefix = f"{where}: " if where else ""
        raise CliError(f"{prefix}{message} (see {self.prog} --help)", BAD_INPUT)


def common_options() -> Parser:
    common = Parser(add_help=False)
    # SUPPRESS: a verb that is not given --json leaves ``interlude --json VERB`` in force.
    common.add_argument(
        JSON_FLAG,
        action="store_true",
        default=argparse.SUPPRESS,
        help="print JSON on stdout (and nothing else); errors as JSON on stderr",
    )
    common.add_argument(
        WIDE_FLAG,
        action="store_true",
        default=argparse.SUPPRESS,
        help="full ids and details in tables, however long the lines get",
    )
    return common


def wants_json(argv: Iterable[str]) -> bool:
    """``--json`` anywhere before ``--``: known before parsing, so a usage error is JSON too."""
    for arg in argv:
        if arg == "--":
            return False
        if arg == JSON_FLAG:
            return True
    return False


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


def choice_of(values: type[Enum], what: str) -> Callable[[str], str]:
    """An argument type accepting one of an enum's values, naming all of them when refused."""
    allowed = [str(member.value) for member in values]

    def parse(text: str) -> str:
        if text not in allowed:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {text!r}; one of {', '.join(allowed)}"
            )
        return text

    parse.__name__ = what  # argparse names the type in some messages
    return parse


def one_of(values: type[Enum]) -> str:
    return ", ".join(str(member.value) for member in values)


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
