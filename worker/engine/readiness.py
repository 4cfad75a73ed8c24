"""A worker takes no task until its database answers with the schema this code expects.

Started against a database that is away (a restart, a network not up yet, a wrong host) or
whose schema is missing or behind (``interlude db upgrade`` not run yet), a worker would say
"ready" and fail every step it takes. Instead it says what is wrong on one line and checks
again, with waits that double up to ``LONGEST_WAIT``, before it starts consuming: the worker
comes up by itself once the database does (as Celery waits for its broker), and meanwhile it
answers no ``celery inspect ping``, which is what the compose healthcheck asks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url
from sqlalchemy.exc import SQLAlchemyError

from models.db import database_exists
from models.db_errors import UPGRADE_HINT
from models.settings import Settings, get_settings

log = logging.getLogger(__name__)
# alembic logs lines at INFO for each plugin it loads and each migration context it opens:
# noise at every worker's start.
ALEMBIC = "alembic"

FIRST_WAIT = 1.0
LONGEST_WAIT = 30.0


def database_problem(url: str) -> str | None:
    """Why a worker cannot work with the database at ``url`` now, or None when it can."""
    logging.getLogger(ALEMBIC).setLevel(logging.WARNING)
    from models.migrate import schema_status

    try:
        status = schema_status(url)
    except SQLAlchemyError as exc:
        original = getattr(exc, "orig", None) or exc
        first = (str(original).strip().splitlines() or [type(exc).__name__])[0]
        return f"cannot reach the database ({first})"
    if status.up_to_date:
        return None
    if status.current is None:
        if not database_exists(url):  # an embedded database's file: only the upgrade makes it
            path = Path(make_url(url).database or "").resolve()
            return f"no database file at {path}: {UPGRADE_HINT}"
        return f"the database has no interlude schema yet: {UPGRADE_HINT}"
    if status.current in status.known:
        return (
            f"the database schema is at revision {status.current}, older than this "
            f"interlude's {status.head}: {UPGRADE_HINT}"
        )
    return (
        f"the database schema is at revision {status.current}, which this interlude does not "
        f"know (its newest is {status.head}): a newer interlude migrated it; deploy that one"
    )


def where(settings: Settings) -> str:
    """The database a process uses, as an operator should read it (never its password)."""
    embedded = settings.embedded_notice()
    if embedded is not None:
        return embedded
    return make_url(settings.database_url).render_as_string(hide_password=True)


def wait_for_database(**_: Any) -> None:
    """Block the worker's start until the database is ready (Celery's ``celeryd_after_setup``:
    logging is set up, nothing is consumed yet)."""
    settings = get_settings()
    wait = FIRST_WAIT
    while (problem := database_problem(settings.database_url)) is not None:
        log.error(
            "not taking tasks: %s; checking again in %gs (database: %s)",
            problem,
            wait,
            where(settings),
            extra={"action": "database_not_ready"},
        )
        time.sleep(wait)
        wait = min(wait * 2, LONGEST_WAIT)
    log.info("database ready: %s", where(settings), extra={"action": "database_ready"})
