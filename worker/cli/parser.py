"""argparse, made to fail with one line and to give every verb ``--help`` and ``--json``."""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable, Iterable
from enum import Enum
from typing import TYPE_CHECKING, Any, NoReturn, TypeAlias

from worker.cli.exits import BAD_INPUT, CliError

if TYPE_CHECKING:
    from worker.cli.output import Output

Handler = Callable[[argparse.Namespace, "Output"], int]
Subparsers: TypeAlias = "argparse._SubParsersAction[Parser]"

PROG = "interlude"
# Bounds of what the command accepts as arguments.
MAX_COUNT = 100_000  # --limit: rows in one listing
MAX_SECONDS = 366 * 86400.0  # --expires-in, --timeout: a year
NUMBER_LIMIT = 40
NAME_LIMIT = 200
ID_LIMIT = 64
REASON_LIMIT = 1000
MAX_PORT = 65535
SHOWN_LIMIT = 40
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


# Actions that take an argument's text; the others (flags, --help, --version) take none.
_VALUE_ACTIONS = (None, "store", "append", "extend")


class Parser(argparse.ArgumentParser):
    """An ArgumentParser whose usage errors are one line on stderr with status 2, and whose
    every argument is checked to be UTF-8 text before its own type sees it."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]

    def add_argument(self, *args: Any, **kwargs: Any) -> argparse.Action:
        # The one place every argument of every verb passes: none reaches a database, a JSON
        # value or a log line holding bytes that are not text.
        if kwargs.get("action") in _VALUE_ACTIONS:
            kwargs["type"] = utf8_checked(kwargs.get("type"))
        return super().add_argument(*args, **kwargs)

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
    # --json and --wide are taken between the group and its verb too (``runs --json list``).
    parser = sub.add_parser(name, help=help, description=help, parents=[common_options()])
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


def utf8_checked(convert: Callable[[str], Any] | None) -> Callable[[str], Any]:
    """``convert`` (or the text as it is) for an argument that is UTF-8 text, refused otherwise.

    Python hands over bytes that are not UTF-8 as lone surrogates ("surrogateescape"); no
    database column or JSON value can hold them, so they are refused here, naming the option.
    """

    def parse(text: str) -> Any:
        try:
            text.encode("utf-8")
        except UnicodeEncodeError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not UTF-8 text") from None
        return text if convert is None else convert(text)

    if convert is not None:
        # argparse names an argument's type by its function's name in some messages.
        functools.update_wrapper(parse, convert)
    return parse


def shown(text: str, limit: int = SHOWN_LIMIT) -> str:
    """An argument quoted in an error, cut so that a huge one keeps the line readable."""
    return repr(text if len(text) <= limit else text[:limit] + "…")


def bounded_int(maximum: int) -> Callable[[str], int]:
    """A whole number from 1 to ``maximum``."""

    def parse(text: str) -> int:
        digits = text.strip()
        # Counted before converting: int() of 5,000 digits is refused (or slow) by Python.
        fits = digits.isdecimal() and len(digits.lstrip("0")) <= len(str(maximum))
        if not fits or not 1 <= int(digits) <= maximum:
            # One message for "-1", "1.5", "0" and "9" * 5000: the range is what helps.
            raise argparse.ArgumentTypeError(
                f"{shown(text)} must be a whole number from 1 to {maximum}"
            )
        return int(digits)

    parse.__name__ = "number"
    return parse


positive_int = bounded_int(MAX_COUNT)


def bounded_float(maximum: float) -> Callable[[str], float]:
    """A number above 0 and at most ``maximum`` (``1e308`` and ``inf`` are refused)."""

    def parse(text: str) -> float:
        if len(text) > NUMBER_LIMIT:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a number")
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
        if not 0 < value <= maximum:
            raise argparse.ArgumentTypeError(
                f"{shown(text)} must be above 0 and at most {maximum:g}"
            )
        return value

    parse.__name__ = "number"
    return parse


positive_float = bounded_float(MAX_SECONDS)


def bounded_text(limit: int, what: str = "value") -> Callable[[str], str]:
    """Free text of at most ``limit`` characters."""

    def parse(text: str) -> str:
        if len(text) > limit:
            raise argparse.ArgumentTypeError(f"the {what} is longer than {limit} characters")
        return text

    parse.__name__ = what
    return parse


# Names (flows, actors, keys) are stored in columns of 200 characters; ids are 32.
name_text = bounded_text(NAME_LIMIT, "name")
id_text = bounded_text(ID_LIMIT, "id")
reason_text = bounded_text(REASON_LIMIT, "reason")


def port(text: str) -> int:
    if not (text.isdecimal() and len(text) <= len(str(MAX_PORT))) or not 0 < int(text) <= MAX_PORT:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a port (1 to {MAX_PORT})")
    return int(text)
