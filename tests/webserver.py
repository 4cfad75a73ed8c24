"""A real ``interlude serve`` subprocess for the web tests."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import uuid
from pathlib import Path

import httpx

from tests.forked import ForkedProcess, spawn_interlude


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


class WebServer:
    def __init__(self, env: dict[str, str], log_dir: Path) -> None:
        self.env = env
        self.log_path = log_dir / f"serve-{uuid.uuid4().hex[:6]}.log"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: ForkedProcess | subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 30.0) -> WebServer:
        self.proc = spawn_interlude(
            ["serve", "--port", str(self.port)], env=self.env, log_path=self.log_path
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline and self.proc.poll() is None:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        output = self.output()[-3000:]
        self.stop()
        raise RuntimeError(f"interlude serve did not start:\n{output}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)

    def output(self) -> str:
        return self.log_path.read_text(errors="replace")
