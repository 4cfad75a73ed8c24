"""What the command reads besides its arguments: JSON values, the credential, a confirmation."""

from __future__ import annotations

import getpass
import json
import os
import sys
from pathlib import Path
from typing import Any

from worker.cli.exits import BAD_INPUT, NOT_CONFIRMED, CliError

TOKEN_ENV = "INTERLUDE_ACTOR_TOKEN"


def read_text(source: str, what: str) -> str:
    """The text of ``@FILE`` (``@-`` is stdin) or the argument itself."""
    if not source.startswith("@"):
        return source
    name = source[1:]
    if name == "-":
        return sys.stdin.read()
    try:
        return Path(name).read_text(encoding="utf-8")
    except OSError as exc:
        raise CliError(f"{what}: cannot read {name}: {exc.strerror or exc}", BAD_INPUT) from None
    except UnicodeDecodeError:
        raise CliError(f"{what}: {name} is not UTF-8 text", BAD_INPUT) from None


def parse_json(source: str, what: str) -> Any:
    """``JSON`` or ``@FILE`` as a value; bad JSON is one clear line naming the option."""
    text = read_text(source, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(
            f"{what} is not valid JSON: {exc.msg} (line {exc.lineno} column {exc.colno})",
            BAD_INPUT,
        ) from None


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
    sys.stderr.write(f"{question} [y/N] ")
    sys.stderr.flush()
    try:
        answer = sys.stdin.readline().strip().lower()
    except (EOFError, OSError):
        answer = ""
    if answer not in {"y", "yes"}:
        raise CliError("not confirmed; nothing was done", NOT_CONFIRMED)
