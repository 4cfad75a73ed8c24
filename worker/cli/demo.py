"""``interlude demo``: the procurement story end to end on the embedded default, narrated.

``run_story`` is the stage of every demo (``interlude demo agent`` tells another story on it).
Everything runs on this machine with no server: SQLite in ``.interlude/demo/`` under the
working directory (wiped at the start), kombu's filesystem broker in the same folder, and one
real ``celery worker`` subprocess, which is stopped at the end whatever happens.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from models.contracts import InterruptView, ResumeContract
from models.db import dispose_engines
from models.errors import InterludeError
from models.settings import Settings, get_settings, reset_settings
from worker.ops.processes import ProcessStartError, start_celery, stop_process

T = TypeVar("T")

DEMO_FOLDER = Path(".interlude") / "demo"
FLOW_MODULE = "examples.procurement"
QUEUES = "interlude.steps,interlude.resumes,interlude.maintenance,interlude.notify"
WORKER_READY_SECONDS = 40.0
STEP_SECONDS = 30.0
STOP_SECONDS = 10.0
CERTIFICATE = {
    "certificate_id": "EC-7781",
    "engineer": "Ada Lovelace",
    "conclusion": "fit_for_purpose",
    "notes": "rated for 16 bar at 120 C",
}
VALVES = {"sku": "VLV-200", "description": "gate valve DN200", "unit_price": 310.0}


class DemoError(Exception):
    """The story did not go as told; the message says where."""


def say(text: str = "") -> None:
    print(text, flush=True)


def run_demo() -> int:
    """Run the procurement story; 0 when it ends as narrated, 1 (one line on stderr) if not."""
    title = "interlude demo: a purchase request waits for an engineering certificate"
    return run_story(FLOW_MODULE, title, _story)


def run_story(flow_module: str, title: str, story: Callable[[Settings], None]) -> int:
    """Tell ``story`` with the flows of ``flow_module`` on a fresh embedded machine.

    0 when it ends as narrated, 1 (with one line on stderr) otherwise.
    """
    home = (Path.cwd() / DEMO_FOLDER).resolve()
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    env = {
        "INTERLUDE_DATABASE_URL": f"sqlite:///{home / 'interlude.db'}",
        "INTERLUDE_BROKER_URL": "filesystem://",
        "INTERLUDE_BROKER_FOLDER": str(home / "broker"),
        "INTERLUDE_FLOWS": flow_module,
    }
    worker: subprocess.Popen[bytes] | None = None
    try:
        with _embedded(env) as settings:
            say(title)
            from models.migrate import upgrade

            upgrade(settings.database_url)
            say(f"  database  {settings.database_url} (migrated)")
            worker = _start_worker(env, home / "worker.log")
            say(f"  broker    filesystem:// in {settings.broker_folder}")
            say(f"  worker    one real celery worker, pid {worker.pid}, its log in {home}")
            say()
            story(settings)
        return 0
    except Exception as exc:
        # One line for the reader; the worker's log holds the rest.
        reason = " ".join(str(exc).split())
        if not isinstance(exc, DemoError | InterludeError):
            reason = f"{type(exc).__name__}: {reason}"
        print(f"interlude demo failed: {reason}", file=sys.stderr)
        if worker is not None:
            _show_log_tail(home / "worker.log")
        return 1
    finally:
        if worker is not None:
            _stop(worker)


@contextmanager
def _embedded(env: dict[str, str]) -> Iterator[Settings]:
    """Point this process (settings, engines, the Celery app) at the demo's folder, then back."""
    from worker.app import app, broker_url
    from worker.engine.broker_options import broker_options

    saved_env = {key: os.environ.get(key) for key in env}
    keys = ("broker_url", "broker_transport_options", "task_send_sent_event")
    saved_conf = {key: app.conf[key] for key in keys}
    os.environ.update(env)
    reset_settings()
    dispose_engines()
    settings = get_settings()
    # The app read its settings when it was imported: give it the demo's broker. Task-sent
    # events are for Flower, which does not watch a filesystem broker.
    app.close()
    app.conf.update(
        broker_url=broker_url(settings),
        broker_transport_options=broker_options(settings),
        task_send_sent_event=False,
    )
    try:
        yield settings
    finally:
        app.close()
        app.conf.update(saved_conf)
        for key, value in saved_env.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reset_settings()
        dispose_engines()


def _start_worker(env: dict[str, str], log_path: Path) -> subprocess.Popen[bytes]:
    args = ["--pool", "solo", "--without-mingle", "--without-gossip", "--without-heartbeat"]
    args += ["-Q", QUEUES, "-n", f"demo-{uuid.uuid4().hex[:6]}@%h"]
    try:
        return start_celery(
            "worker",
            args,
            env={**os.environ, **env},
            log_path=log_path,
            timeout=WORKER_READY_SECONDS,
        )
    except ProcessStartError:
        raise DemoError(f"the worker did not start; see {log_path}") from None


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Stop the worker and anything it started (its own process group)."""
    stop_process(process, STOP_SECONDS)


def _show_log_tail(path: Path, lines: int = 15) -> None:
    try:
        tail = path.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return
    print("last lines of the worker's log:", file=sys.stderr)
    for line in tail:
        print(f"  {line}", file=sys.stderr)


def wait_until(what: str, probe: Callable[[], T | None], seconds: float = STEP_SECONDS) -> T:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = probe()
        if found is not None:
            return found
        time.sleep(0.05)
    raise DemoError(f"gave up after {seconds:.0f}s waiting for {what}")


def _contract(interrupt: InterruptView, actor: str, certificate: dict[str, Any]) -> ResumeContract:
    """What a responder submits: bound to the checkpoint, scope and evidence they were shown."""
    return ResumeContract.for_interrupt(
        interrupt,
        actor=actor,
        decision="approved",
        input=certificate,
        idempotency_key=f"demo-{uuid.uuid4().hex}",
    )


def _story(settings: Settings) -> None:
    from examples import procurement
    from worker import add_actor, enqueue_run, get_interrupt, get_run, submit_resume
    from worker.runs import list_effects

    def pending(run_id: str) -> InterruptView | None:
        run = get_run(run_id)
        if run.state in {"failed", "cancelled", "expired"}:
            raise DemoError(f"run {run_id} ended {run.state}: {run.error}")
        return run.pending_interrupts[0] if run.pending_interrupts else None

    def finished(run_id: str) -> str | None:
        state = get_run(run_id).state
        return state if state in {"succeeded", "failed", "cancelled", "expired"} else None

    ada = add_actor("ada", ["engineer"])
    bo = add_actor("bo", ["buyer"])
    say("actors: ada (engineer) and bo (buyer); their credentials are stored only as hashes")

    procurement.submit_request("PR-1001", "acme-valves", [{**VALVES, "quantity": 4}])
    run_id = enqueue_run(
        "procurement", {"request_id": "PR-1001"}, idempotency_key="PR-1001", started_by="bo"
    )
    say(f"[1] run started: {run_id} (procurement of PR-1001: 4 gate valves, 1240.00)")

    first = wait_until("the run to wait", lambda: pending(run_id))
    check = next(e.receipt for e in list_effects(run_id) if e.name == "supplier_check")
    say(
        f"[2] waiting: step {first.step!r} asks for {first.kind} {first.schema_id} "
        f"from role {', '.join(first.roles)}; the supplier check ran once "
        f"(acme-valves: {check['result']})"
    )
    procurement.submit_request("PR-1002", "obsidian-holdings", [{**VALVES, "quantity": 1}])
    other = enqueue_run("procurement", {"request_id": "PR-1002"}, started_by="bo")
    other_state = wait_until("the second run to finish", lambda: finished(other))
    outcome = get_run(other).output["outcome"]
    if get_run(run_id).state != "waiting" or other_state != "succeeded":
        raise DemoError("the second run did not finish while the first waited")
    say(
        f"    worker free: while PR-1001 waits, PR-1002 ran to the end ({outcome}) on the "
        "same single worker; the waiting run holds no worker, only rows in SQL"
    )

    amended = procurement.amend_request("PR-1001", [{**VALVES, "quantity": 6}])
    say(f"[3] bo amends PR-1001 while it waits: 6 valves, {amended.amount:.2f} (revision 2)")
    renewed = submit_resume(_contract(first, "ada", CERTIFICATE), ada)
    if renewed.outcome != "renewed_review_required" or renewed.new_interrupt_id is None:
        raise DemoError(f"expected a renewed review, got {renewed.outcome}: {renewed.reason}")
    second = get_interrupt(renewed.new_interrupt_id)
    say(
        f"    ada certifies revision 1, as she was shown it -> {renewed.outcome}: the request "
        "changed, her certificate is kept on a new interrupt and review is required again"
    )

    stale = submit_resume(_contract(first, "ada", CERTIFICATE), ada)
    if stale.outcome != "stale":
        raise DemoError(f"expected a stale refusal, got {stale.outcome}: {stale.reason}")
    say(f"[4] stale resume refused: the old contract submitted again -> stale ({stale.reason})")
    denied = submit_resume(_contract(second, "bo", CERTIFICATE), bo)
    if denied.outcome != "denied":
        raise DemoError(f"expected a denial, got {denied.outcome}: {denied.reason}")
    say(f"    bo tries to certify the new interrupt himself -> denied ({denied.reason})")

    contract = _contract(second, "ada", second.previous_input or CERTIFICATE)
    accepted = submit_resume(contract, ada)
    if not accepted.accepted:
        raise DemoError(f"expected acceptance, got {accepted.outcome}: {accepted.reason}")
    say(
        f"[5] authorized resume accepted: ada certifies revision 2 "
        f"({contract.input['certificate_id']}) -> {accepted.outcome}"
    )
    again = submit_resume(contract, ada)
    say(f"    the same submission sent twice -> {again.outcome}: nothing happens a second time")

    state = wait_until("the run to finish", lambda: finished(run_id))
    run = get_run(run_id)
    if state != "succeeded":
        raise DemoError(f"run {run_id} ended {state}: {run.error}")
    orders = procurement.orders_for("PR-1001")
    checks = procurement.supplier_checks("acme-valves")
    if len(orders) != 1 or checks != 1:
        raise DemoError(f"expected one order and one check, found {len(orders)} and {checks}")
    applied = [e.name for e in list_effects(run_id) if e.status == "applied"]
    say(
        f"[6] effect applied once: order {orders[0]['id']} placed for {orders[0]['amount']:.2f}; "
        f"the certify step ran again after the wait and reused its supplier check "
        f"({checks} check on record; effects applied: {', '.join(applied)})"
    )
    say(f"[7] finished: run {run_id} {state} ({run.output['outcome']})")
    say()
    say("Look around (same database):")
    say(f"  INTERLUDE_DATABASE_URL={settings.database_url} {_command()} runs show {run_id}")


def _command() -> str:
    """How to run ``interlude`` from here: by name when it is on the PATH, else by its path
    (``make demo`` runs it from .venv/bin, which a fresh shell's PATH does not hold)."""
    import shutil

    installed = Path(sys.executable).parent / "interlude"
    found = shutil.which("interlude")
    if found is not None and Path(found).resolve() == installed.resolve():
        return "interlude"
    if installed.exists():
        relative = os.path.relpath(installed)
        return str(installed) if relative.startswith("..") else relative
    return "interlude"
