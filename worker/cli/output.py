"""How the command prints: JSON for scripts, aligned tables for people (ages and times are
written by ``worker.present.formats``, as in the web inbox).

Everything printed for people goes through ``escape_controls`` (error lines are made one
line first): text that callers supplied (ids, reasons, payloads) can neither forge a line nor
reach the terminal as an escape sequence. JSON is printed exact; JSON has its own escaping.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from worker.present.formats import compact, jsonable
from worker.present.safetext import escape_controls

if TYPE_CHECKING:
    from rich.console import Console

# Piped human output is not wrapped at 80 columns: ids would be folded in half.
PIPE_WIDTH = 200
PAIR_LIMIT = 160
# Error lines are cut here: a message quoting a huge argument stays readable.
ERROR_LIMIT = 1000
# Ids in tables: long enough to be unique in practice and to type back as a prefix (6+).
SHORT_ID = 8
DETAIL_LIMIT = 80


def flatten(value: Any, prefix: str = "") -> list[tuple[str, Any]]:
    """Nested mappings as dotted keys: how a result of unknown shape becomes a table."""
    if isinstance(value, Mapping):
        pairs: list[tuple[str, Any]] = []
        for key, item in value.items():
            pairs += flatten(item, f"{prefix}.{key}" if prefix else str(key))
        if pairs or not prefix:
            return pairs
    return [(prefix or "value", value)]


def one_line(message: str, limit: int = ERROR_LIMIT) -> str:
    text = " ".join(str(message).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


class Output:
    """Where a verb writes: JSON alone on stdout with ``--json``, rich tables otherwise."""

    def __init__(self, as_json: bool = False, *, wide: bool = False) -> None:
        self.as_json = as_json
        # --wide: full ids and details, however long the lines get.
        self.wide = wide
        self._console: Console | None = None

    @property
    def console(self) -> Console:
        if self._console is None:
            from rich.console import Console

            width = None if sys.stdout.isatty() else PIPE_WIDTH
            self._console = Console(
                file=sys.stdout, width=width, highlight=False, markup=False, emoji=False
            )
        return self._console

    def id(self, value: str | None) -> str:
        """An id as a table shows it: its first SHORT_ID characters, all of it with --wide."""
        if value is None:
            return "-"
        return value if self.wide or len(value) <= SHORT_ID else value[:SHORT_ID]

    def cut(self, text: str) -> str:
        """A detail cut to DETAIL_LIMIT characters, unless --wide."""
        return text if self.wide else compact(text, DETAIL_LIMIT)

    def json(self, data: Any) -> None:
        sys.stdout.write(json.dumps(jsonable(data), indent=2, default=str) + "\n")
        sys.stdout.flush()

    def line(self, text: str = "") -> None:
        from rich.text import Text

        self.render(Text(escape_controls(text)))

    def table(
        self,
        columns: Sequence[str],
        rows: Iterable[Sequence[Any]],
        title: str | None = None,
        keep: Sequence[str] = (),
    ) -> None:
        """Columns named in ``keep`` (ids, times) never wrap; the others fold when needed."""
        from rich import box
        from rich.table import Table
        from rich.text import Text

        table = Table(box=box.SIMPLE_HEAD, show_edge=False, pad_edge=False)
        for column in columns:
            table.add_column(column, overflow="fold", no_wrap=column in keep)
        for row in rows:
            table.add_row(*(Text(escape_controls(str(cell))) for cell in row))
        if title is not None:
            self.line(title)
        if table.row_count == 0:
            self.line("  none")
            return
        self.render(table)

    def pairs(self, rows: Iterable[tuple[str, Any]]) -> None:
        """Aligned ``key  value`` lines without a header."""
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, show_header=False, pad_edge=False)
        table.add_column("key")
        table.add_column("value", overflow="fold")
        for key, value in rows:
            shown = value if isinstance(value, str) else compact(value, PAIR_LIMIT)
            table.add_row(Text(escape_controls(key)), Text(escape_controls(shown)))
        self.render(table)

    def render(self, renderable: Any) -> None:
        # Rich pads every line to the table's width; trailing blanks only get in the way.
        with self.console.capture() as captured:
            self.console.print(renderable)
        # split("\n"), not splitlines(): that also splits at U+2028, U+2029, U+0085 and the
        # other separators, which escape_controls wrote as escapes already.
        text = captured.get()
        for line in text.removesuffix("\n").split("\n") if text else []:
            sys.stdout.write(line.rstrip() + "\n")
        sys.stdout.flush()

    def block(self, title: str, data: Any) -> None:
        """A heading and pretty JSON under it (schemas, evidence, templates)."""
        self.line(f"{title}:")
        text = json.dumps(jsonable(data), indent=2, default=str, ensure_ascii=False)
        # Only json's own line breaks: a U+2028 (or U+2029, U+0085) in a value stays in its
        # line, where self.line escapes it, and cannot start a forged line of its own.
        for line in text.split("\n"):
            self.line(f"  {line}")


_json_errors = False


def set_json_errors(enabled: bool) -> None:
    """Under ``--json`` a failure is a JSON object on stderr too: ``{"error": ..., "exit": N}``."""
    global _json_errors
    _json_errors = enabled


def error(message: str, status: int) -> int:
    """The one line a failure prints on stderr; returns ``status`` for the caller to exit with."""
    if _json_errors:
        sys.stderr.write(json.dumps({"error": one_line(message), "exit": status}) + "\n")
    else:
        sys.stderr.write(f"interlude: error: {escape_controls(one_line(message))}\n")
    sys.stderr.flush()
    return status


def note(message: str) -> None:
    """A message for the person at the terminal that must stay off a ``--json`` stdout."""
    sys.stderr.write(escape_controls(one_line(message)) + "\n")
    sys.stderr.flush()
