"""The ``interlude`` command, driven through the real console script in a subprocess.

Every verb runs against PostgreSQL and SQLite (the ``db`` fixture) with Redis and a real
worker, so runs progress while the command inspects and resumes them.
"""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import socket
import subprocess
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from models.contracts import InterruptView
from models.db import utcnow
from tests.conftest import worker_env
from tests.forked import INTERLUDE, run_interlude
from tests.services import ROOT, WorkerProcess, wait_for
from worker import add_actor, enqueue_run, get_run, list_resume_attempts

FINISHED = {"succeeded", "failed", "cancelled", "expired"}


@dataclass(frozen=True)
class Ran:
    args: tuple[str, ...]
    status: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


class Cli:
    """Runs ``interlude`` as an operator would, and keeps every output for the leak checks."""

    def __init__(self, database_url: str) -> None:
        self.env = worker_env(database_url)
        self.env.pop("INTERLUDE_ACTOR_TOKEN", None)
        self.history: list[Ran] = []

    def run(self, *args: str, token: str | None = None) -> Ran:
        env = dict(self.env)
        if token is not None:
            env["INTERLUDE_ACTOR_TOKEN"] = token
        done = run_interlude(args, env=env)
        ran = Ran(args, done.returncode, done.stdout, done.stderr)
        self.history.append(ran)
        return ran

    def ok(self, *args: str, token: str | None = None) -> Ran:
        ran = self.run(*args, token=token)
        assert ran.status == 0, f"{args} exited {ran.status}: {ran.stderr}{ran.stdout}"
        return ran

    def json(self, *args: str, token: str | None = None) -> Any:
        return self.ok(*args, "--json", token=token).json()

    def fails(self, status: int, *args: str, token: str | None = None) -> Ran:
        """A failure: the expected status and exactly one clear line on stderr."""
        ran = self.run(*args, token=token)
        assert ran.status == status, f"{args} exited {ran.status}, not {status}: {ran.stderr}"
        lines = ran.stderr.splitlines()
        assert len(lines) == 1, f"{args} printed {len(lines)} lines on stderr: {ran.stderr}"
        if "--json" in args:
            assert json.loads(lines[0])["exit"] == status, lines[0]
        else:
            assert lines[0].startswith("interlude: error: "), lines[0]
        assert "Traceback" not in ran.stderr + ran.stdout
        return ran

    def assert_secret_shown_only(self, secret: str, where: Ran | None = None) -> None:
        for ran in self.history:
            shown = secret in ran.stdout or secret in ran.stderr
            if ran is where:
                assert ran.stdout.count(secret) == 1 and secret not in ran.stderr
            else:
                assert not shown, f"the credential appeared in the output of {ran.args}"


@pytest.fixture()
def cli(db: str, shared_worker: WorkerProcess) -> Iterator[Cli]:
    runner = Cli(db)
    yield runner
    # Whatever the test did, no credential reached the worker's log.
    assert "ilc_" not in shared_worker.output()


def waiting_on(run_id: str, kind: str | None = None) -> InterruptView:
    def pending() -> InterruptView | None:
        run = get_run(run_id)
        found = [i for i in run.pending_interrupts if kind is None or i.kind == kind]
        return found[0] if run.state == "waiting" and found else None

    found: InterruptView = wait_for(pending, timeout=30)
    return found


def finished(run_id: str) -> str:
    state: str = wait_for(lambda: get_run(run_id).state in FINISHED and get_run(run_id).state)
    return state


def in_terminal(cli: Cli, args: tuple[str, ...], answers: list[tuple[str, str]]) -> tuple[int, str]:
    """Run ``interlude`` on a pseudo-terminal, typing each answer after its prompt appears."""
    leader, follower = pty.openpty()
    process = subprocess.Popen(
        [str(INTERLUDE), *args],
        cwd=ROOT,
        env=cli.env,
        stdin=follower,
        stdout=follower,
        stderr=follower,
        start_new_session=True,
    )
    os.close(follower)
    transcript, seen = b"", 0
    try:
        while True:
            ready, _, _ = select.select([leader], [], [], 0.2)
            if not ready:
                if process.poll() is not None:
                    break
                continue
            try:
                chunk = os.read(leader, 4096)
            except OSError:  # EIO: the command has closed the terminal
                break
            transcript += chunk
            if answers and answers[0][0].encode() in transcript[seen:]:
                prompt, answer = answers.pop(0)
                seen = transcript.index(prompt.encode(), seen) + len(prompt)
                os.write(leader, answer.encode() + b"\n")
        status = process.wait(timeout=60)
    finally:
        os.close(leader)
        if process.poll() is None:
            process.kill()
    assert not answers, f"never asked {answers[0][0]!r}: {transcript.decode(errors='replace')}"
    return status, transcript.decode(errors="replace")


def write_json(path: Path, value: Any) -> str:
    path.write_text(json.dumps(value), encoding="utf-8")
    return str(path)


def test_an_operator_resumes_through_every_outcome(cli: Cli, tmp_path: Path) -> None:
    # Given a migrated database, two actors and a run of the approval flow that waits
    assert cli.json("db", "upgrade")["revision"]
    added = cli.ok("actors", "add", "alice", "--role", "approver", "--json")
    alice = added.json()["credential"]
    viewer = cli.ok("actors", "add", "vera", "--role", "viewer")
    assert "will not be shown again" in viewer.stdout
    (vera,) = [ln.split(": ", 1)[1] for ln in viewer.stdout.splitlines() if "credential:" in ln]
    start = ("runs", "start", "approval", "--input", '{"env": "prod"}', "--started-by", "ops")
    run_id = cli.json(*start, "--idempotency-key", "deploy-1")["id"]
    interrupt = waiting_on(run_id)

    # When the operator looks at the runs and the work queue
    listed = cli.json("runs", "list", "--state", "waiting")
    people = cli.ok("runs", "list", "--flow", "approval", "--limit", "5").stdout
    queue = cli.json("interrupts", "list", "--status", "pending", "--kind", "approval")
    shown = cli.json("interrupts", "show", interrupt.id)
    shown_text = cli.ok("interrupts", "show", interrupt.id).stdout

    # Then the waiting run has an age and the interrupt shows what a resume must bind to
    assert [r["id"] for r in listed] == [run_id] and listed[0]["waiting_seconds"] >= 0
    assert run_id[:8] in people and run_id not in people and "waiting " in people
    assert [i["id"] for i in queue] == [interrupt.id]
    template = shown["template"]
    assert template["schema_version"] == "resume.v1"
    assert template["checkpoint_id"] == interrupt.checkpoint_id
    assert template["evidence_hash"] == interrupt.evidence_hash
    assert template["scope"] == {"action": "deploy", "env": "prod"}
    assert "comment" in shown["interrupt"]["json_schema"]["properties"]
    assert shown["interrupt"]["roles"] == ["approver"]
    for text in (interrupt.evidence_hash, "required input (JSON Schema)", "resume.v1", "approver"):
        assert text in shown_text

    # When refused resumes are submitted, each exits with its own status
    as_alice = ("--actor", "alice", "--decision", "approved", "--yes")
    resume = ("resume", interrupt.id)
    malformed = write_json(
        tmp_path / "malformed.json", {"schema_version": "resume.v0", "run_id": run_id}
    )
    cli.fails(10, "resume", "--contract", malformed, "--yes", token=alice)
    cli.fails(11, *resume, *as_alice, token="ilc_not-the-credential")
    mine = {**template, "actor": {"type": "human", "id": "alice"}}
    stale = write_json(
        tmp_path / "stale.json", {**mine, "scope": {"env": "staging"}, "idempotency_key": "s1"}
    )
    stale_run = cli.fails(12, "resume", "--contract", stale, "--yes", token=alice)
    past = (utcnow() - timedelta(minutes=1)).isoformat()
    expired = write_json(
        tmp_path / "expired.json", {**mine, "expires_at": past, "idempotency_key": "e1"}
    )
    cli.fails(13, "resume", "--contract", expired, "--yes", token=alice)
    cli.fails(14, *resume, "--actor", "vera", "--decision", "approved", "--yes", token=vera)
    # An input the schema refuses is caught before submission (nothing is recorded); the
    # gateway's own refusal of it is checked in tests/acceptance/test_cli_operator.py.
    unchecked = cli.fails(15, *resume, *as_alice, "--input", '{"amount_limit": "lots"}')
    cli.fails(3, "resume", "no-such-interrupt", *as_alice, token=alice)
    assert "scope differs" in stale_run.stderr

    # Then the right actor's resume is accepted once; the same key again is a duplicate
    keyed = (*resume, *as_alice, "--input", '{"comment": "ship it"}', "--idempotency-key", "k1")
    accepted = cli.json(*keyed, token=alice)
    duplicate = cli.json(*keyed, token=alice)
    assert (accepted["outcome"], accepted["exit_status"]) == ("accepted", 0)
    assert (duplicate["outcome"], duplicate["original_outcome"]) == ("duplicate", "accepted")
    assert finished(run_id) == "succeeded"
    assert get_run(run_id).output["comment"] == "ship it"

    # And the run's timeline shows every attempt, the transitions and who made them
    story = cli.json("runs", "show", run_id)
    story_text = cli.ok("runs", "show", run_id).stdout
    outcomes = [a["outcome"] for a in story["resume_attempts"]]
    assert outcomes == [  # newest first
        "duplicate",
        "accepted",
        "denied",
        "expired",
        "stale",
        "unauthenticated",
        "malformed",
    ]
    assert (story["run"]["state"], story["run"]["started_by"]) == ("succeeded", "ops")
    assert ("human:alice", "accept_resume") in {(e["actor"], e["trigger"]) for e in story["events"]}
    whats = [entry["what"] for entry in story["timeline"]]
    assert "nothing was submitted" in unchecked.stderr and "amount_limit" in unchecked.stderr
    # One row for the accepted resume: the transition, with the attempt and the decision
    assert "resume accepted" not in whats and "interrupt resolved" not in whats
    assert whats.index("accept_resume waiting → resuming") < whats.index(
        "complete running → succeeded"
    )
    for text in ("resume denied", "accept_resume", "succeeded"):
        assert text in story_text
    assert {a.outcome for a in list_resume_attempts(run_id=run_id)} >= {"malformed"}

    # And the statistics count each outcome
    stats = cli.json("stats")
    assert stats["resume_attempts"]["denied"] == 1
    assert stats["resume_attempts"]["accepted"] == 1
    assert stats["waiting_runs"] == 0

    # And the credentials were shown once, when the actors were added, and never again
    cli.assert_secret_shown_only(alice, where=added)
    cli.assert_secret_shown_only(vera, where=viewer)


def test_actor_roles_and_revocation(cli: Cli) -> None:
    # Given an actor without the approver role and a waiting run
    added = cli.ok("actors", "add", "bob", "--role", "viewer", "--json")
    bob = added.json()["credential"]
    interrupt = waiting_on(enqueue_run("approval", {"env": "qa"}))
    resume = ("resume", interrupt.id, "--actor", "bob", "--decision", "rejected", "--yes")
    cli.fails(14, *resume, token=bob)

    # When the operator changes bob's roles, then revokes him
    roles = cli.json("actors", "roles", "bob", "--role", "approver", "--role", "auditor")
    listed = cli.json("actors", "list")
    cli.json("actors", "revoke", "bob")
    table = cli.ok("actors", "list").stdout

    # Then the roles were replaced, the revocation shows, and his credential stops working
    assert roles == {"id": "bob", "roles": ["approver", "auditor"]}
    assert [(a["id"], a["roles"], a["revoked_at"]) for a in listed] == [
        ("bob", ["approver", "auditor"], None)
    ]
    assert "bob" in table and "revoked" in table
    cli.fails(11, *resume, token=bob)
    cli.fails(3, "actors", "revoke", "nobody")
    cli.fails(4, "actors", "add", "bob", "--role", "viewer")
    cli.assert_secret_shown_only(bob, where=added)


def test_renewed_review_keeps_the_input_and_effects_show_in_the_timeline(
    cli: Cli, tmp_path: Path
) -> None:
    # Given a run that booked an effect and waits for a review of a document
    secret = add_actor("rita", ["approver"])
    document = tmp_path / "spec.txt"
    document.write_text("revision 1", encoding="utf-8")
    given = write_json(tmp_path / "input.json", {"document": str(document), "amount": 3})
    run_id = cli.json("runs", "start", "cli_review", "--input", f"@{given}")["id"]
    first = waiting_on(run_id, kind="evidence")
    before = cli.ok("runs", "show", run_id).stdout
    assert "effect applied" in before and "'book'" in before and "evidence 'review'" in before

    # When the document changes while the run waits, and rita resumes what she saw
    document.write_text("revision 2", encoding="utf-8")
    review = ("--actor", "rita", "--decision", "approved", "--yes", "--json")
    verdict = '{"verdict": "fine"}'
    renewed = cli.fails(16, "resume", first.id, *review, "--input", verdict, token=secret)

    # Then the review is renewed: a new interrupt keeps her input for the second look
    new_id = renewed.json()["new_interrupt_id"]
    assert new_id and new_id in renewed.stderr
    again = cli.json("interrupts", "show", new_id)
    assert again["interrupt"]["previous_input"] == {"verdict": "fine", "note": ""}
    assert again["interrupt"]["supersedes"] == first.id
    assert again["template"]["input"] == {"verdict": "fine", "note": ""}
    superseded = cli.json("interrupts", "list", "--run", run_id, "--status", "superseded")
    assert [i["id"] for i in superseded] == [first.id]

    # When she resumes the new interrupt, the run finishes and the effect ran once
    cli.json("resume", new_id, *review, "--input", verdict, token=secret)
    assert finished(run_id) == "succeeded"
    story = cli.json("runs", "show", run_id)
    assert [(e["name"], e["status"]) for e in story["effects"]] == [("book", "applied")]
    assert [i["status"] for i in story["interrupts"]] == ["superseded", "resolved"]
    assert [a["outcome"] for a in story["resume_attempts"]] == [  # newest first
        "accepted",
        "renewed_review_required",
    ]
    cli.assert_secret_shown_only(secret)


def test_pause_and_cancel(cli: Cli) -> None:
    # Given a waiting run, its flow's operator and a responder who is not one
    secret = add_actor("dave", ["approver"])
    ops = add_actor("ops", ["operator"])
    run_id = enqueue_run("approval", {"env": "prod"})
    interrupt = waiting_on(run_id)

    # When someone asks it to pause without authenticating, or without the operator role
    no_token = cli.fails(2, "runs", "pause", run_id, "--actor", "ops")
    forged = cli.fails(11, "runs", "pause", run_id, "--actor", "ops", token="not-a-credential")
    denied = cli.fails(14, "runs", "cancel", run_id, "--actor", "dave", "--json", token=secret)

    # Then each is refused in one line, changes nothing, and the refusals are on the record
    assert "INTERLUDE_ACTOR_TOKEN" in no_token.stderr
    assert "refused (unauthenticated)" in forged.stderr
    assert "refused (denied): actor dave holds none of the operator roles" in denied.stderr
    assert (get_run(run_id).state, get_run(run_id).pause_requested_by) == ("waiting", None)
    refusals = [
        (e["actor"], e["detail"]["action"], e["detail"]["outcome"])
        for e in cli.json("runs", "show", run_id)["events"]
        if e["trigger"] == "operator_refused"
    ]
    assert refusals == [
        ("human:ops", "pause", "unauthenticated"),
        ("human:dave", "cancel", "denied"),
    ]

    # When the operator asks it to pause, authenticated
    paused = cli.json("runs", "pause", run_id, "--actor", "ops", token=ops)
    assert paused == {"id": run_id, "pause_requested_by": "human:ops"}

    # When dave resumes it at a terminal, confirming and typing his credential at the prompt
    status, transcript = in_terminal(
        cli,
        ("resume", interrupt.id, "--actor", "dave", "--decision", "approved"),
        [("Submit this resume? [y/N]", "y"), ("credential for dave:", secret)],
    )
    assert status == 0, transcript
    assert "accepted" in transcript and secret not in transcript

    # Then it stops at its next step boundary with an operator interrupt
    operator = waiting_on(run_id, kind="operator")
    queue = cli.json("interrupts", "list", "--kind", "operator")
    assert [(i["id"], i["run_id"]) for i in queue] == [(operator.id, run_id)]

    # And when it is cancelled, its pending interrupt is closed and it cannot be cancelled again
    cancel = ("runs", "cancel", run_id, "--actor", "ops", "--reason", "not needed")
    cancelled = cli.json(*cancel, token=ops)
    assert (cancelled["state"], cancelled["cancelled_by"]) == ("cancelled", "human:ops")
    closed = cli.json("interrupts", "list", "--run", run_id, "--status", "cancelled")
    assert [i["id"] for i in closed] == [operator.id]
    cli.fails(4, "runs", "cancel", run_id, "--actor", "ops", token=ops)
    cli.fails(4, "runs", "pause", run_id, "--actor", "ops", token=ops)

    # Then what does not exist exits 3, with one line
    cli.fails(3, "runs", "show", "no-such-run")
    cli.fails(3, "interrupts", "show", "no-such-interrupt")
    cli.assert_secret_shown_only(secret)
    cli.assert_secret_shown_only(ops)


def test_sweep_and_reap_run_once_now(cli: Cli) -> None:
    # Given a run whose interrupt deadline passes while nobody answers
    run_id = enqueue_run("approval", {"expires_in": 0.5})
    interrupt = waiting_on(run_id)
    wait_for(lambda: utcnow() > interrupt.deadline + timedelta(milliseconds=100))

    # When the operator sweeps once, and reaps once
    swept = cli.json("sweep")
    reaped = cli.json("reap")
    again = cli.ok("sweep").stdout

    # Then the expiry policy was applied to the interrupt, and nothing else was due
    assert swept == {"handled": 1}
    assert get_run(run_id).state == "expired"
    assert reaped == {"handled": 0}
    assert "0 expired interrupts handled" in again
    expired = cli.json("interrupts", "list", "--status", "expired")
    assert [i["id"] for i in expired] == [interrupt.id]


def test_metrics_are_served_until_interrupted(cli: Cli) -> None:
    # Given a waiting run and the exporter started on a free port
    waiting_on(enqueue_run("approval", {"env": "qa"}))
    port = free_port()
    with sigint_as_at_a_terminal():
        exporter = subprocess.Popen(
            [str(INTERLUDE), "metrics", "--port", str(port)],
            cwd=ROOT,
            env=cli.env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
    try:
        # When Prometheus scrapes it
        page = wait_for(lambda: scrape(port), timeout=30)
    finally:
        # Then Ctrl-C stops it cleanly
        exporter.send_signal(signal.SIGINT)
        stdout, stderr = exporter.communicate(timeout=30)
    assert 'interlude_waiting_runs{kind="approval"} 1.0' in page
    assert 'interlude_runs{state="waiting"} 1.0' in page
    assert 'interlude_runs{state="failed"} 0.0' in page
    assert exporter.returncode == 0, stderr
    assert stdout == "" and "Traceback" not in stderr


@contextmanager
def sigint_as_at_a_terminal() -> Iterator[None]:
    """Children started in this block get SIGINT's default disposition, as at a terminal.

    A test run started in the background by a shell without job control (``make test &`` in a
    script, many CI runners) ignores SIGINT, and children inherit that: the exporter would never
    see the Ctrl-C this test sends. A handler, unlike "ignore", is reset to the default by exec.
    """
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def scrape(port: int) -> str | None:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            text: str = answer.read().decode()
            return text
    except OSError:
        return None


def test_bad_input_is_refused_before_anything_is_read_or_written(tmp_path: Path) -> None:
    # These fail on their arguments alone (no database is reached), so they run once; the
    # other refusals of this kind are checked in-process by tests/unit/test_cli_format.py.
    cli = Cli(f"sqlite:///{tmp_path / 'untouched.db'}")
    contract = write_json(tmp_path / "contract.json", {"schema_version": "resume.v1"})
    resume = ("resume", "some-interrupt", "--actor", "alice", "--decision", "approved")
    unconfirmed = cli.fails(5, "resume", "--contract", contract, token="ilc_given")
    no_credential = cli.fails(2, "resume", "--contract", contract, "--yes")
    bad_json = cli.fails(2, *resume, "--yes", "--input", "{not json", token="ilc_given")
    bad_start = cli.fails(2, "runs", "start", "approval", "--input", "[1")
    assert "--yes" in unconfirmed.stderr
    assert "INTERLUDE_ACTOR_TOKEN" in no_credential.stderr
    assert "--input is not valid JSON" in bad_json.stderr
    assert "--input is not valid JSON" in bad_start.stderr
    assert not (tmp_path / "untouched.db").exists()


def test_help_on_the_command_and_the_operations_verbs(tmp_path: Path) -> None:
    # Every verb's --help is checked in-process by tests/unit/test_cli_format.py; the demo
    # itself runs through the console script in tests/acceptance/test_demo.py.
    env = worker_env(f"sqlite:///{tmp_path / 'unused.db'}")
    for args in ([], ["demo"]):
        done = subprocess.run(
            [str(INTERLUDE), *args, "--help"],
            cwd=ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: interlude"), done.stdout
        if not args:
            for status in ("10", "11", "12", "13", "14", "15", "16", "bad input", "not found"):
                assert status in done.stdout
