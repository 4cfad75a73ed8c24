"""``interlude`` commands and Celery processes for the tests, each a new process forked from one
that has imported their code already.

The suite runs some 400 commands and 190 Celery and web processes; as processes of their own,
each spent most of its CPU importing Celery, SQLAlchemy, psycopg, pydantic and our modules
again: more than half of the whole suite's CPU. Here a zygote (one per test process, started at
its first use) imports them once and forks a child per command or process. The child is what
``interlude`` or ``python -m celery`` would be: a new process with its own arguments,
environment, working directory and standard streams, running the console script's ``main``
(``worker.cli.main``, Celery's ``main``), whose exit status, output and exit handlers are
theirs. Only the imports are shared, and none of them reads the environment: the zygote never
imports the Celery app (``worker.app``, ``worker.engine.tasks``), builds no settings and opens
no connection, and it refuses to start if something it imports does.

What stays with a real ``exec``: the tests about the console script itself (packaging, first
run, the demo), commands on a terminal, and any command whose environment changes how Python
itself starts (``PYTHON*``, the locale), which ``run_interlude``, ``start_celery`` and
``spawn_interlude`` give to ``subprocess``.

Run as a script, this module is the zygote: it reads one JSON request a line on its standard
input and answers each with the child's pid, then, for a command, its exit status. A process
left running (Celery's, ``interlude serve``) is watched by a forked monitor that writes its
exit status to a file when it ends.
"""

from __future__ import annotations

import atexit
import gc
import json
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

BIN = Path(sys.executable).parent
INTERLUDE = BIN / "interlude"
ROOT = Path(__file__).resolve().parent.parent
# Variables read as the interpreter starts: a command with other values than the zygote's
# runs as a real subprocess.
STARTUP_PREFIXES = ("PYTHON", "LC_")
STARTUP_NAMES = ("LANG",)
# The two programs a child runs: the console script's main, or Celery's.
INTERLUDE_MAIN = "interlude"
CELERY_MAIN = "celery"
# What the Celery app reads at import: never imported by the zygote.
NOT_SHARED = ("worker.app", "worker.engine.tasks")


def run_interlude(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    cwd: Path | str = ROOT,
    input: str | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """``interlude *args`` as ``subprocess.run(..., capture_output=True, text=True)`` would run
    it (standard input ``input``, else empty), in a child of this test process's zygote."""
    if _starts_differently(env):
        return subprocess.run(
            [str(INTERLUDE), *args],
            cwd=cwd,
            env=dict(env),
            input=input or "",
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    return _zygote().run(INTERLUDE_MAIN, [str(INTERLUDE), *args], env, str(cwd), input, timeout)


def start_celery(
    kind: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    log_path: Path,
    cwd: Path = ROOT,
    timeout: float = 30.0,
) -> ForkedProcess | subprocess.Popen[bytes]:
    """``worker.ops.processes.start_celery``, the process forked from the zygote: in a session
    of its own, its output appended to ``log_path``; returned once it logged that it is ready."""
    from worker.ops import processes

    if _starts_differently(env):
        return processes.start_celery(
            kind, args, env=env, log_path=log_path, cwd=cwd, timeout=timeout
        )
    command = processes.celery_command(kind, args)
    # As ``python -m celery`` has them: the module's file first, the working folder on the path.
    argv = [str(Path(__import__("celery").__file__).parent / "__main__.py"), *command[3:]]
    process = _zygote().spawn(CELERY_MAIN, argv, env, str(cwd), log_path)
    processes.wait_until_ready(process, kind, log_path, timeout)
    return process


def spawn_interlude(
    args: Sequence[str], *, env: Mapping[str, str], log_path: Path, cwd: Path = ROOT
) -> ForkedProcess | subprocess.Popen[bytes]:
    """``interlude *args`` left running (``interlude serve``), in a session of its own, its
    output appended to ``log_path``."""
    if _starts_differently(env):
        with log_path.open("ab") as log:
            return subprocess.Popen(
                [str(INTERLUDE), *args],
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
    return _zygote().spawn(INTERLUDE_MAIN, [str(INTERLUDE), *args], env, str(cwd), log_path)


class ForkedProcess:
    """A process the zygote forked: what ``worker.ops.processes`` needs of a ``Popen``. Its
    exit status is read from the file its monitor writes when it ends."""

    def __init__(self, pid: int, exit_path: Path) -> None:
        self.pid = pid
        self.exit_path = exit_path
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None and self.exit_path.exists():
            self.returncode = int(self.exit_path.read_text())
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0)
            time.sleep(0.02)
        assert self.returncode is not None
        return self.returncode


def _starts_differently(env: Mapping[str, str]) -> bool:
    def startup(environ: Mapping[str, str]) -> dict[str, str]:
        return {
            k: v for k, v in environ.items() if k.startswith(STARTUP_PREFIXES) or k in STARTUP_NAMES
        }

    return startup(env) != startup(os.environ)


class _Zygote:
    def __init__(self) -> None:
        # Unbuffered: an answer is waited for with select() on the pipe, which cannot see
        # lines a buffered reader has already taken from it (a command that ends at once
        # sends its pid and its status together).
        self.process = subprocess.Popen(
            [sys.executable, __file__],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            bufsize=0,
        )
        self.lock = threading.Lock()
        self.scratch = Path(tempfile.mkdtemp(prefix="interlude-zygote-"))
        self.spawned = 0

    def alive(self) -> bool:
        return self.process.poll() is None

    def _ask(self, request: dict[str, Any]) -> int:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(request).encode() + b"\n")
        return int(_answer(self.process.stdout, 60)["pid"])

    def run(
        self,
        program: str,
        argv: list[str],
        env: Mapping[str, str],
        cwd: str,
        input: str | None,
        timeout: float,
    ) -> subprocess.CompletedProcess[str]:
        with self.lock, tempfile.TemporaryDirectory(dir=self.scratch) as scratch:
            paths = {name: os.path.join(scratch, name) for name in ("stdin", "stdout", "stderr")}
            Path(paths["stdin"]).write_text(input or "")
            request = {"op": "run", "program": program, "argv": argv, "env": dict(env), "cwd": cwd}
            pid = self._ask({**request, **paths})
            assert self.process.stdout is not None
            try:
                status = int(_answer(self.process.stdout, timeout)["status"])
            except subprocess.TimeoutExpired:
                os.kill(pid, signal.SIGKILL)
                _answer(self.process.stdout, 30)
                raise subprocess.TimeoutExpired(argv, timeout) from None
            return subprocess.CompletedProcess(
                argv,
                status,
                Path(paths["stdout"]).read_text(errors="replace"),
                Path(paths["stderr"]).read_text(errors="replace"),
            )

    def spawn(
        self, program: str, argv: list[str], env: Mapping[str, str], cwd: str, log_path: Path
    ) -> ForkedProcess:
        log_path.touch()  # read for the ready marker from now on
        with self.lock:
            self.spawned += 1
            exit_path = self.scratch / f"exit-{self.spawned}"
            request = {
                "op": "spawn",
                "program": program,
                "argv": argv,
                "env": dict(env),
                "cwd": cwd,
                "log": str(log_path),
                "exit": str(exit_path),
            }
            return ForkedProcess(self._ask(request), exit_path)


def _answer(stream: IO[bytes], timeout: float) -> dict[str, Any]:
    ready, _, _ = select.select([stream], [], [], timeout)
    if not ready:
        raise subprocess.TimeoutExpired("interlude", timeout)
    line = stream.readline()  # (byte by byte: nothing past the line is taken from the pipe)
    if not line:
        raise RuntimeError("the tests' zygote went away")
    answer: dict[str, Any] = json.loads(line)
    return answer


_zygotes: dict[int, _Zygote] = {}


def _zygote() -> _Zygote:
    # One per test process (a forked test process starts its own).
    zygote = _zygotes.get(os.getpid())
    if zygote is None or not zygote.alive():
        zygote = _zygotes[os.getpid()] = _Zygote()
    return zygote


# The zygote --------------------------------------------------------------------------------


def _prime() -> None:
    """Import what a command or a Celery process imports, but the Celery app."""
    import importlib
    import pkgutil

    import celery.apps.beat
    import celery.apps.worker
    import celery.bin.celery
    import celery.worker.consumer  # noqa: F401
    import kombu.transport.redis  # noqa: F401

    for package in ("statemachine", "models", "worker"):
        module = importlib.import_module(package)
        for info in pkgutil.walk_packages(module.__path__, package + "."):
            if info.name not in NOT_SHARED and not info.name.endswith("__main__"):
                importlib.import_module(info.name)
    shared = [name for name in NOT_SHARED if name in sys.modules]
    if shared:
        raise SystemExit(f"the zygote imported {shared}: they read the environment at import")


def _serve() -> None:
    requests = os.fdopen(os.dup(0), "r")
    answers = os.fdopen(os.dup(1), "w")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1):
        os.dup2(devnull, fd)

    def answer(**fields: int) -> None:
        answers.write(json.dumps(fields) + "\n")
        answers.flush()

    for line in requests:
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        if request["op"] == "run":
            pid = os.fork()
            if pid == 0:
                requests.close()
                answers.close()
                _child(request)
            answer(pid=pid)
            _, status = os.waitpid(pid, 0)
            answer(status=os.waitstatus_to_exitcode(status))
        else:
            read_pid, write_pid = os.pipe()
            if os.fork() == 0:
                requests.close()
                answers.close()
                os.close(read_pid)
                _monitor(request, write_pid)
            os.close(write_pid)
            with os.fdopen(read_pid) as told:
                answer(pid=int(told.read()))
        # Monitors that have ended.
        while True:
            try:
                ended, _ = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                break
            if not ended:
                break


def _monitor(request: dict[str, Any], write_pid: int) -> None:
    """Fork the process left running (Celery's, ``interlude serve``) in a session of its own,
    say its pid, and write its exit status to the request's file when it ends."""
    pid = os.fork()
    if pid == 0:
        os.close(write_pid)
        os.setsid()
        _child(request)
    os.write(write_pid, str(pid).encode())
    os.close(write_pid)
    _, status = os.waitpid(pid, 0)
    partial = request["exit"] + ".partial"
    Path(partial).write_text(str(os.waitstatus_to_exitcode(status)))
    os.rename(partial, request["exit"])
    os._exit(0)


def _child(request: dict[str, Any]) -> None:
    """The command or process: its streams, environment, folder and arguments, then its
    ``main``; it leaves as the interpreter would, but for freeing every object the zygote
    imported (a third of a command's CPU): exit handlers run, streams are flushed."""
    # A command: its standard input, output and error in files of its own. A process left
    # running: no input, both outputs appended to its log.
    spawned = request["op"] == "spawn"
    streams = [(request.get("stdin", os.devnull), os.O_RDONLY, (0,))]
    if spawned:
        streams.append((request["log"], os.O_WRONLY | os.O_CREAT | os.O_APPEND, (1, 2)))
    else:
        written = os.O_WRONLY | os.O_CREAT | os.O_TRUNC
        streams += [(request["stdout"], written, (1,)), (request["stderr"], written, (2,))]
    for path, mode, fds in streams:
        opened = os.open(path, mode, 0o600)
        for fd in fds:
            os.dup2(opened, fd)
        os.close(opened)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = list(request["argv"])
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        if request["program"] == CELERY_MAIN:
            sys.path[0] = request["cwd"]
            from celery.__main__ import main as celery_main

            celery_main()
            status = 0
        else:
            from worker.cli import main

            status = main()
    except SystemExit as exc:  # as the interpreter treats one that leaves the script
        status = 0 if exc.code is None else exc.code if isinstance(exc.code, int) else 1
        if not isinstance(exc.code, int | None):
            print(exc.code, file=sys.stderr)
    except BaseException:
        traceback.print_exc()
        status = 1
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


if __name__ == "__main__":
    # As in the console script: its folder first on the path, not this one.
    sys.path[0] = str(BIN)
    _prime()
    # The children share the imported objects' pages until they write to them; the collector
    # would write to every one of them.
    gc.freeze()
    _serve()
