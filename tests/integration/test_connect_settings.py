"""The PostgreSQL engine's connections carry the connect timeout and keepalives libpq applies."""

from __future__ import annotations

import pytest

from models.db import get_engine


def test_pooled_connections_carry_the_timeout_and_keepalives(db: str, backend: str) -> None:
    if backend != "postgresql":
        pytest.skip("SQLite has no server connection")
    with get_engine().connect() as conn:
        driver = conn.connection.driver_connection
        assert driver is not None
        params = driver.info.get_parameters()
    assert {k: params.get(k) for k in ("connect_timeout", "keepalives_idle")} == {
        "connect_timeout": "10",
        "keepalives_idle": "30",
    }
