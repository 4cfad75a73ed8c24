"""The bench's own PostgreSQL databases, and what the server counts in them.

Every measurement gets a fresh database (created here, dropped after), so that the server's
per-database counters (``pg_stat_database``) and its statement log (``log_statement = 'all'``,
set on that database only) count exactly the processes of that measurement.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg

ADMIN_DSN = os.environ.get(
    "INTERLUDE_BENCH_PG_DSN", "postgresql://postgres@127.0.0.1:5432/postgres"
)
# Where the Debian cluster writes the server's stderr (and so its statement log).
SERVER_LOG = Path(os.environ.get("BENCH_PG_LOG", "/var/log/postgresql/postgresql-15-main.log"))


def _admin(admin: str = ADMIN_DSN) -> psycopg.Connection[tuple[object, ...]]:
    return psycopg.connect(admin, autocommit=True)


def dsn(name: str, admin: str = ADMIN_DSN) -> str:
    """A libpq URL of database ``name`` on the server of ``admin`` (the machine's, by default)."""
    return admin.rsplit("/", 1)[0] + f"/{name}"


def sqlalchemy_url(name: str) -> str:
    return dsn(name).replace("postgresql://", "postgresql+psycopg://", 1)


@contextmanager
def scratch_database(prefix: str, admin: str = ADMIN_DSN) -> Iterator[str]:
    """A new empty database on the server of ``admin``, dropped (connections and all) when
    the block ends."""
    name = f"{prefix}_{uuid.uuid4().hex[:8]}"
    with _admin(admin) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield name
    finally:
        with _admin(admin) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def log_statements(name: str) -> None:
    """Have the server log every statement of new connections to ``name`` (no parameters)."""
    with _admin() as conn:
        conn.execute(f"ALTER DATABASE \"{name}\" SET log_statement = 'all'")
        # Parameters could hold anything a test puts there; the count needs only the text.
        conn.execute(f'ALTER DATABASE "{name}" SET log_parameter_max_length = 0')


def quiesce(name: str, timeout: float = 30) -> None:
    """Wait until no backend is connected to ``name``: each one flushed its statistics."""
    deadline = time.monotonic() + timeout
    with _admin() as conn:
        while True:
            row = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (name,)
            ).fetchone()
            if row is not None and row[0] == 0:
                return
            if time.monotonic() > deadline:
                raise RuntimeError(f"backends still connected to {name} after {timeout} s")
            time.sleep(0.05)


def transactions(name: str) -> int:
    """Committed plus rolled-back transactions of every backend that was connected to ``name``."""
    with _admin() as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        row = conn.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s",
            (name,),
        ).fetchone()
    assert row is not None
    return int(row[0])


def check_log() -> None:
    """Refuse to count, in one line, where the server's log cannot be read."""
    if not os.access(SERVER_LOG, os.R_OK):
        raise SystemExit(
            f"cannot read the PostgreSQL server log {SERVER_LOG} to count statements: "
            "set BENCH_PG_LOG, run as a user who may read it, or do not count"
        )


def log_offset() -> int:
    return SERVER_LOG.stat().st_size if SERVER_LOG.exists() else 0


_LINE = re.compile(r"^\S+ \S+ \S+ \[(\d+)\] \S*@(\S+) LOG:  (?:statement|execute [^:]*): (.*)$")


BRACKETS = frozenset({"BEGIN", "COMMIT", "ROLLBACK"})


@dataclass
class LoggedStatements:
    """Statements the server logged for one database: each backend's kinds, in order."""

    sequences: dict[int, list[str]] = field(default_factory=dict)

    def by_kind(self, pids: set[int]) -> Counter[str]:
        return Counter(kind for pid in pids for kind in self.sequences.get(pid, []))

    def transactions(self, pids: set[int]) -> int:
        """BEGIN…COMMIT blocks, plus statements sent outside one (each its own transaction)."""
        count = 0
        for pid in pids:
            inside = False
            for kind in self.sequences.get(pid, []):
                if kind == "BEGIN":
                    inside = True
                elif kind in {"COMMIT", "ROLLBACK"}:
                    count += 1
                    inside = False
                elif not inside:
                    count += 1
        return count


def kind_of(sql: str) -> str:
    """BEGIN, COMMIT, ROLLBACK, ping (the pool's pre-ping), or the first word and its table."""
    words = sql.strip().rstrip(";").split()
    if not words or words == ["SELECT", "1"]:
        return "ping"  # SQLAlchemy's psycopg dialect pings with an empty statement (";")
    head = words[0].upper()
    if head in {"BEGIN", "COMMIT", "ROLLBACK"}:
        return head
    upper = [w.upper().lstrip("(") for w in words]
    # The first table written or read: INSERT INTO t, UPDATE t, FROM t (not FOR UPDATE OF t).
    for i, word in enumerate(upper[:-1]):
        if word in {"INTO", "FROM"} or (word == "UPDATE" and (i == 0 or upper[i - 1] != "FOR")):
            table = words[i + 1].strip('"(')
            return f"{head} {table}"
    return head


def logged_statements(name: str, since: int) -> LoggedStatements:
    """Parse the server log from byte ``since`` for the statements of database ``name``."""
    found = LoggedStatements()
    current: tuple[int, list[str]] | None = None

    def finish() -> None:
        if current is not None:
            found.sequences.setdefault(current[0], []).append(kind_of(" ".join(current[1])))

    with SERVER_LOG.open("rb") as log:
        log.seek(since)
        for raw in log:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            if line.startswith("\t") and current is not None:
                current[1].append(line)  # a statement's next line
                continue
            finish()
            current = None
            match = _LINE.match(line)
            if match is not None and match.group(2) == name:
                current = (int(match.group(1)), [match.group(3)])
        finish()
    return found


def costs(
    runs: int, transactions: int, logged: LoggedStatements, roles: dict[str, set[int]]
) -> dict[str, Any]:
    """Per run: what the server counted (transactions) and logged (statements), by role.

    ``statements`` leaves out BEGIN, COMMIT, ROLLBACK and pool pre-pings, which are listed
    apart; ``round_trips`` counts everything the server logged. Backends of no role are
    ``other``.
    """
    known = set().union(*roles.values()) if roles else set()
    roles = {**roles, "other": logged.sequences.keys() - known}

    def summary(pids: set[int]) -> dict[str, float]:
        kinds = logged.by_kind(pids)
        trips = sum(kinds.values())
        pings = kinds["ping"]
        return {
            "transactions": logged.transactions(pids) / runs,
            "statements": (trips - pings - sum(kinds[k] for k in BRACKETS)) / runs,
            "pings": pings / runs,
            "round_trips": trips / runs,
        }

    everyone = set().union(*roles.values())
    kinds = logged.by_kind(everyone)
    return {
        "transactions": transactions / runs,
        **{k: v for k, v in summary(everyone).items() if k != "transactions"},
        "logged_transactions": logged.transactions(everyone) / runs,
        "processes": {role: summary(pids) for role, pids in roles.items() if pids},
        "by_kind": {k: n / runs for k, n in kinds.most_common()},
    }
