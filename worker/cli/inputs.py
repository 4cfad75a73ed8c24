"""What the command reads besides its arguments: JSON values, the credential, a confirmation.

Every value read is bounded: at most MAX_INPUT_BYTES from a file, stdin or the argument, JSON
nested at most MAX_JSON_DEPTH deep, finite numbers only, integers no longer than Python's own
limit for converting them; anything else is one line naming the option (exit 2).
"""

from __future__ import annotations

import getpass
import json
import os
import sys
from typing import Any, BinaryIO

from worker.cli.exits import BAD_INPUT, NOT_CONFIRMED, CliError
from worker.present.jsontext import loads_finite
from worker.present.safetext import escape_controls

TOKEN_ENV = "INTERLUDE_ACTOR_TOKEN"
MAX_INPUT_BYTES = 1024 * 1024
MAX_JSON_DEPTH = 100
_MIB = MAX_INPUT_BYTES // (1024 * 1024)


def read_text(source: str, what: str) -> str:
    """The text of ``@FILE`` (``@-`` is stdin) or the argument itself, at most 1 MiB."""
    if not source.startswith("@"):
        if len(source.encode("utf-8", "surrogatepass")) > MAX_INPUT_BYTES:
            raise CliError(f"{what} is longer than {_MIB} MiB", BAD_INPUT)
        # Bytes that are not UTF-8 arrive as lone surrogates: refused as they are from a file.
        try:
            source.encode("utf-8")
        except UnicodeEncodeError:
            raise CliError(f"{what} is not UTF-8 text", BAD_INPUT) from None
        return source
    name = source[1:]
    if name == "-":
        return _decoded(_read_capped(sys.stdin.buffer, what, "stdin"), what, "stdin")
    try:
        with open(name, "rb") as file:
            data = _read_capped(file, what, name)
    except OSError as exc:
        raise CliError(f"{what}: cannot read {name}: {exc.strerror or exc}", BAD_INPUT) from None
    return _decoded(data, what, name)


def _read_capped(file: BinaryIO, what: str, name: str) -> bytes:
    # One byte more than allowed tells a file that is too long (or endless, /dev/zero) at once.
    data = file.read(MAX_INPUT_BYTES + 1)
    if len(data) > MAX_INPUT_BYTES:
        raise CliError(f"{what}: {name} is longer than {_MIB} MiB", BAD_INPUT)
    return data


def _decoded(data: bytes, what: str, name: str) -> str:
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise CliError(f"{what}: {name} is not UTF-8 text", BAD_INPUT) from None


def parse_json(source: str, what: str) -> Any:
    """``JSON`` or ``@FILE`` as a value; bad JSON is one clear line naming the option."""
    text = read_text(source, what)
    try:
        value = loads_finite(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})",
            BAD_INPUT,
        ) from None
    except RecursionError:
        raise CliError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels", BAD_INPUT) from None
    except ValueError as exc:
        # An integer past Python's conversion limit (4300 digits), or a non-finite number.
        raise CliError(f"{what} is not accepted: {_first_clause(exc)}", BAD_INPUT) from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise CliError(f"{what} is nested deeper than {MAX_JSON_DEPTH} levels", BAD_INPUT)
    return value


def _first_clause(exc: ValueError) -> str:
    # "Exceeds the limit (4300 digits) for integer string conversion: value has 5000 digits;
    # use sys.set_int_max_str_digits() ...": the advice is for programmers, not for this user.
    return str(exc).split(";")[0]


def _depth(value: Any) -> int:
    """How deeply ``value`` nests, counted without recursion."""
    deepest = 0
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        deepest = max(deepest, level)
        if deepest > MAX_JSON_DEPTH:
            return deepest
        stack.extend((child, level + 1) for child in children)
    return deepest


def parse_object(source: str | None, what: str) -> dict[str, Any]:
    if source is None:
        return {}
    value = parse_json(source, what)
    if not isinstance(value, dict):
        raise CliError(f"{what} must be a JSON object, not {type(value).__name__}", BAD_INPUT)
    return value


def credential(actor: str | None) -> str:
    """The actor's credential from the environment, or typed at a hidden prompt.

    Never an argument: arguments are visible to every user of the machine in ``ps``.
    """
    token = os.environ.get(TOKEN_ENV, "").strip()
    if token:
        return token
    if not sys.stdin.isatty():
        raise CliError(
            f"no credential: set {TOKEN_ENV} or run in a terminal to be asked for it", BAD_INPUT
        )
    try:
        typed = getpass.getpass(f"credential for {actor or 'the actor'}: ").strip()
    except EOFError:
        typed = ""
    if not typed:
        raise CliError("no credential was given", BAD_INPUT)
    return typed


def confirm(question: str, *, assume_yes: bool, what: str = "resume") -> None:
    """Go on only when the person says yes; without a terminal, only with ``--yes``."""
    if assume_yes:
        return
    if not sys.stdin.isatty():
        raise CliError(
            f"not confirmed: stdin is not a terminal; pass --yes to {what} without asking",
            NOT_CONFIRMED,
        )
    sys.stderr.write(f"{escape_controls(question)} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline().strip().lower()
    except (EOFError, OSError):
        answer = ""
    if answer not in {"y", "yes"}:
        raise CliError("not confirmed; nothing was done", NOT_CONFIRMED)
