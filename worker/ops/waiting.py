"""How long runs have waited, by the one definition every surface shows (models.queries)."""

from __future__ import annotations

from collections.abc import Collection
from datetime import datetime

from models import queries
from models.db import transaction


def waiting_since(run_ids: Collection[str]) -> dict[str, datetime]:
    """When each waiting run among ``run_ids`` began its current wait."""
    with transaction(readonly=True) as session:
        return queries.waiting_since_of(session, set(run_ids))
