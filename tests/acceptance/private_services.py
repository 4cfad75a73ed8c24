"""A private Redis and a private PostgreSQL cluster that a test may stop and restart.

The machine's shared servers are never touched: outage tests start their own on free ports,
in their own directories, and remove them afterwards.
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import IO

import redis

from tests.services import unavailable


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrivateRedis:
    """``redis-server`` without persistence: a restart loses every queued message."""

    def __init__(self, directory: Path) -> None:
        self.port = free_port()
        self.directory = directory
        self.proc: subprocess.Popen[bytes] | None = None

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        binary = shutil.which("redis-server")
        if binary is None:
            unavailable("redis-server", FileNotFoundError("redis-server"))
        with (self.directory / f"redis-{self.port}.log").open("ab") as log:
            self.proc = self._spawn(str(binary), log)
        client = redis.Redis.from_url(self.url())
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                return self
            except redis.ConnectionError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)
            finally:
                client.close()

    def _spawn(self, binary: str, log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
                "--dir",
                str(self.directory),
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None


def _pg_bin(name: str) -> str:
    found = sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"))
    path = found[-1] if found else shutil.which(name)
    if path is None:
        unavailable("PostgreSQL server binaries", FileNotFoundError(name))
    return str(path)


class PrivatePostgres:
    """A throwaway cluster (trust auth) run as the ``postgres`` user when we are root."""

    def __init__(self) -> None:
        self.port = free_port()
        # Not under pytest's tmp dir: the postgres user must be able to reach it.
        self.directory = Path(tempfile.mkdtemp(prefix="interlude-pg-"))
        self.data = self.directory / "data"
        self.as_postgres = os.geteuid() == 0

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, *command: str) -> None:
        prefix = ["runuser", "-u", "postgres", "--"] if self.as_postgres else []
        done = subprocess.run(
            [*prefix, *command], capture_output=True, timeout=120, cwd=self.directory
        )
        if done.returncode != 0:
            raise RuntimeError(f"{command[0]} failed: {done.stderr.decode()[-2000:]}")

    def init(self) -> PrivatePostgres:
        if self.as_postgres:
            shutil.chown(self.directory, "postgres", "postgres")
        try:
            self._run(_pg_bin("initdb"), "-D", str(self.data), "-U", "postgres", "--auth=trust")
        except (RuntimeError, OSError) as exc:
            unavailable("a private PostgreSQL cluster", exc)
        return self

    def _ctl(self, action: str, *extra: str) -> None:
        options = f"-p {self.port} -k {self.directory} -c listen_addresses=127.0.0.1"
        self._run(
            _pg_bin("pg_ctl"),
            "-D",
            str(self.data),
            "-o",
            options,
            "-l",
            str(self.directory / "server.log"),
            "-w",
            action,
            *extra,
        )

    def start(self) -> None:
        self._ctl("start")

    def stop(self) -> None:
        self._ctl("stop", "-m", "fast")

    def remove(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._ctl("stop", "-m", "immediate")
        shutil.rmtree(self.directory, ignore_errors=True)
