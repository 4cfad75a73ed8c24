"""A private Redis, PostgreSQL cluster and RabbitMQ node that a test may stop and restart.

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


def _rabbit_bin(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/usr/lib/rabbitmq/bin")
    if path is None:
        unavailable("RabbitMQ", FileNotFoundError(name))
    return str(path)


class PrivateRabbit:
    """A RabbitMQ node of our own: its own name, ports, database, logs and configuration.

    Started with ``rabbitmq-server -detached`` (as the ``rabbitmq`` user when we are root, by
    the distribution's wrapper) and stopped with ``rabbitmqctl stop``; the machine's own node
    is never touched. Queues are durable, so a restart keeps the messages it held.
    """

    def __init__(self) -> None:
        self.port = free_port()
        self.dist_port = free_port()
        self.node = f"interlude-{self.port}@localhost"
        self.directory = Path(tempfile.mkdtemp(prefix="interlude-rabbit-"))
        self.running = False

    def url(self) -> str:
        return f"amqp://guest:guest@127.0.0.1:{self.port}//"

    def _env(self) -> dict[str, str]:
        d = self.directory
        return {
            **os.environ,
            "RABBITMQ_NODENAME": self.node,
            "RABBITMQ_NODE_IP_ADDRESS": "127.0.0.1",
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(self.dist_port),
            "RABBITMQ_MNESIA_BASE": str(d / "mnesia"),
            "RABBITMQ_LOG_BASE": str(d / "log"),
            "RABBITMQ_PID_FILE": str(d / "node.pid"),
            # Our own files: the machine's configuration names the shared node's port and
            # plugins (the management plugin would want the shared node's HTTP port).
            "RABBITMQ_CONFIG_FILE": str(d / "rabbitmq.conf"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(d / "enabled_plugins"),
            # No busy-waiting Erlang schedulers: on two shared cores they took CPU from the
            # workers under test, and the node delivered a couple of messages a second.
            "RABBITMQ_SERVER_ADDITIONAL_ERL_ARGS": "+sbwt none +sbwtdcpu none +sbwtdio none",
        }

    def _ctl(self, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(
            [_rabbit_bin("rabbitmqctl"), "-n", self.node, *args],
            env=self._env(),
            capture_output=True,
            timeout=timeout,
            cwd=self.directory,
        )

    def start(self) -> PrivateRabbit:
        d = self.directory
        try:
            if not (d / "rabbitmq.conf").exists():
                self._prepare()
            subprocess.run(
                [_rabbit_bin("rabbitmq-server"), "-detached"],
                env=self._env(),
                capture_output=True,
                timeout=60,
                cwd=d,
                check=True,
            )
        except (OSError, subprocess.SubprocessError, LookupError) as exc:
            unavailable("a private RabbitMQ node", exc)
        self.running = True
        # -detached returns at once; the node registers with epmd a little later.
        deadline = time.monotonic() + 180
        while True:
            done = self._ctl("await_startup", "--timeout", "60")
            if done.returncode == 0:
                return self
            if time.monotonic() > deadline:
                self.remove()
                unavailable("a private RabbitMQ node", RuntimeError(done.stderr.decode()[-500:]))
            time.sleep(1)

    def _prepare(self) -> None:
        d = self.directory
        (d / "mnesia").mkdir()
        (d / "log").mkdir()
        (d / "rabbitmq.conf").write_text(f"listeners.tcp.1 = 127.0.0.1:{self.port}\n")
        (d / "enabled_plugins").write_text("[].\n")
        if os.geteuid() == 0:  # the wrapper runs the node as the rabbitmq user
            for path in [d, *d.rglob("*")]:
                shutil.chown(path, "rabbitmq", "rabbitmq")

    def stop(self) -> None:
        """Stop the node and wait until its process has exited."""
        if self.running:
            self._ctl("stop", str(self.directory / "node.pid"))
            self.running = False

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)
