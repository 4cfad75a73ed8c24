"""The exporter of docker-compose.yml reads with a role that cannot change a run: the postgres
image's init script (deploy/postgres/) makes it, and ``interlude metrics`` works with it."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from models.migrate import upgrade
from tests.conftest import worker_env
from tests.services import PG_ADMIN_URL, ROOT, create_pg_database

SCRIPT = ROOT / "deploy" / "postgres" / "10-metrics-reader.sh"
INTERLUDE = Path(sys.executable).parent / "interlude"


def test_the_exporter_s_read_only_role_serves_metrics_and_cannot_write() -> None:
    url, drop = create_pg_database()
    admin = make_url(url)
    reader = f"metrics_{uuid.uuid4().hex[:8]}"
    try:
        # Given the init script run as the postgres image runs it, on a new database
        env = dict(
            os.environ,
            POSTGRES_USER=str(admin.username),
            POSTGRES_DB=str(admin.database),
            METRICS_DB_PASSWORD="reader-secret",
            METRICS_DB_USER=reader,
            PGHOST=str(admin.host),
            PGPORT=str(admin.port or 5432),
        )
        done = subprocess.run(["sh", str(SCRIPT)], env=env, capture_output=True, timeout=60)
        assert done.returncode == 0, done.stderr.decode()
        # ... and the schema made afterwards by the owner (`interlude db upgrade`)
        upgrade(url)
        as_reader = admin.set(username=reader, password="reader-secret")
        reader_url = as_reader.render_as_string(hide_password=False)
        cli_env = worker_env(reader_url)

        # When the exporter prints its metrics with that role
        metrics = subprocess.run(
            [str(INTERLUDE), "metrics", "--once"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        # Then they are read, and a write with that role is refused by the database
        assert metrics.returncode == 0, metrics.stderr
        assert "interlude_stats_up 1.0" in metrics.stdout
        started = subprocess.run(
            [str(INTERLUDE), "runs", "start", "quick", "--input", "{}"],
            env=cli_env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert started.returncode != 0
        assert "read-only transaction" in started.stderr or "permission denied" in started.stderr
    finally:
        drop()
        engine = create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        with engine.connect() as conn:
            conn.execute(text(f'DROP ROLE IF EXISTS "{reader}"'))
        engine.dispose()
