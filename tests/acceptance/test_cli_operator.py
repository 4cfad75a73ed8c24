"""What an operator reaches for, through the real console script: short ids and prefixes, the
timeline, one waiting age, retry, wait, follow, bulk cancel, and input checked before asking."""

from __future__ import annotations

import json
from pathlib import Path

from tests.acceptance.test_cli import Cli, cli, finished, waiting_on  # noqa: F401
from tests.services import WorkerProcess
from worker import add_actor, enqueue_run, get_run, list_resume_attempts, submit_resume


def test_prefixes_short_ids_and_one_row_per_resume(cli: Cli) -> None:  # noqa: F811
    # Given a waiting run and a responder
    secret = add_actor("olga", ["approver"])
    run_id = enqueue_run("approval", {"env": "qa"}, started_by="olga-team")
    interrupt = waiting_on(run_id)

    # When the operator lists and shows it by a prefix of its id
    table = cli.ok("runs", "list").stdout
    wide = cli.ok("runs", "list", "--wide").stdout
    shown = cli.json("runs", "show", run_id[:6])
    queue = cli.ok("interrupts", "list", "--run", run_id[:7]).stdout
    too_short = cli.fails(2, "runs", "show", run_id[:4])

    # Then tables carry 8-character ids on one line, --wide and JSON the whole id
    assert run_id[:8] in table and run_id not in table
    assert run_id in wide
    assert shown["run"]["id"] == run_id and shown["run"]["waiting_seconds"] >= 0
    assert interrupt.id[:8] in queue and interrupt.id not in queue
    assert "at least 6 characters" in too_short.stderr

    # When the responder resumes it by a prefix of the interrupt's id
    resume = ("resume", interrupt.id[:6], "--actor", "olga", "--decision", "approved", "--yes")
    cli.json(*resume, "--input", '{"comment": "ok"}', token=secret)
    assert finished(run_id) == "succeeded"
    story = cli.json("runs", "show", run_id)["timeline"]

    # Then the resume is one row, with the actor written as everywhere else
    resumed = [
        e for e in story if e["what"].startswith(("resume ", "accept_resume", "interrupt resolved"))
    ]
    assert [e["what"] for e in resumed] == ["accept_resume waiting → resuming"]
    assert resumed[0]["actor"] == "human:olga" and "attempt" in resumed[0]["detail"]
    assert all(":" in e["actor"] for e in story), [e["actor"] for e in story]
    assert not [e for e in story if e["source"] == "checkpoint"]
    cli.assert_secret_shown_only(secret)


def test_retry_wait_follow_and_bulk_cancel(
    cli: Cli,  # noqa: F811
    shared_worker: WorkerProcess,
    tmp_path: Path,
) -> None:
    # Given a run whose only step fails for good (its gate file is missing), and an operator
    ops = add_actor("ops", ["operator"])
    gate = tmp_path / "gate"
    run_id = cli.json("runs", "start", "cli_retried", "--input", f'{{"gate": "{gate}"}}')["id"]

    # When the operator waits for it, then retries it once the gate exists
    failed = cli.run("runs", "wait", run_id[:8], "--json")
    other_run = enqueue_run("approval", {"env": "x"})
    cli.fails(4, "runs", "retry", other_run, "--actor", "ops", token=ops)
    gate.write_text("open", encoding="utf-8")
    cli.fails(11, "runs", "retry", run_id, "--actor", "ops", token="not-the-credential")
    assert get_run(run_id).state == "failed"
    cli.json("runs", "retry", run_id, "--actor", "ops", "--reason", "gate fixed", token=ops)
    followed = cli.run("runs", "show", run_id, "--follow")
    waited = cli.json("runs", "wait", run_id, "--timeout", "60")

    # Then waiting told how it failed, the retry continued it, and both ends say succeeded
    assert failed.status == 20 and '"state": "failed"' in failed.stdout
    # And the worker's log named the run, its flow and step, and said it failed for good
    log = shared_worker.output()
    assert f"[run {run_id}, flow cli_retried, step attempt]" in log
    assert "run failed for good: step attempt" in log
    assert followed.status == 0, followed.stderr
    assert f"run {run_id} succeeded" in followed.stdout
    output = get_run(run_id).output
    assert output is not None  # runs wait --json carries the run's output
    assert waited == {
        "id": run_id,
        "state": "succeeded",
        "error": None,
        "output": output,
        "exit": 0,
    }
    story = cli.json("runs", "show", run_id)["events"]
    restart = [e for e in story if e["trigger"] == "restart"]
    assert [(e["actor"], e["from_state"], e["to_state"]) for e in restart] == [
        ("human:ops", "failed", "queued")
    ]
    assert restart[0]["detail"]["reason"] == "gate fixed"

    # Given three waiting runs started by one team, and one by another
    mine = [enqueue_run("approval", {"env": f"e{i}"}, started_by="bulk") for i in range(3)]
    other = enqueue_run("approval", {"env": "keep"}, started_by="someone-else")
    for each in [*mine, other]:
        waiting_on(each)

    # When the operator lists them and cancels the team's in bulk
    listed = cli.json("runs", "list", "--started-by", "bulk", "--older-than", "0s")
    timed_out = cli.fails(23, "runs", "wait", mine[0], "--timeout", "0.5")
    unconfirmed = cli.fails(5, *("runs", "cancel", "--state", "waiting"), "--actor", "ops")
    bulk = ("runs", "cancel", "--flow", "approval", "--started-by", "bulk", "--state", "waiting")
    forged = cli.fails(11, *bulk, "--actor", "ops", "--yes", token="not-the-credential")
    responder = add_actor("rita", ["approver"])
    denied = cli.fails(14, *bulk, "--actor", "rita", "--yes", token=responder)
    assert {get_run(r).state for r in mine} == {"waiting"}
    cancelled = cli.json(*bulk, "--actor", "ops", "--yes", token=ops)

    # Then exactly those were cancelled, and the count says so
    assert {r["id"] for r in listed} == set(mine)
    assert "still waiting" in timed_out.stderr
    assert "--yes" in unconfirmed.stderr
    assert "refused (unauthenticated)" in forged.stderr
    assert "3 run(s) not cancelled: rita holds none of the operator roles of flow approval" in (
        denied.stderr
    )
    assert cancelled == {"selected": 3, "cancelled": 3, "skipped": 0, "denied": 0}
    assert {get_run(r).state for r in mine} == {"cancelled"}
    assert get_run(other).state == "waiting"


def test_resume_input_is_checked_before_confirmation_and_credential(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given a run waiting on a review whose schema wants a verdict and nothing else
    document = tmp_path / "doc.txt"
    document.write_text("text", encoding="utf-8")
    run_id = enqueue_run("cli_review", {"document": str(document)})
    interrupt = waiting_on(run_id, kind="evidence")

    # When an input with every field wrong is given, with no credential and no terminal
    bad = '{"verdikt": "fine", "extra": 1}'
    refused = cli.fails(
        15, "resume", interrupt.id, "--actor", "rita", "--decision", "approved", "--input", bad
    )

    # Then every problem is named at once, before any confirmation or credential is asked for
    for field in ("verdict", "verdikt", "extra"):
        assert field in refused.stderr
    assert "nothing was submitted" in refused.stderr
    assert list_resume_attempts(run_id=run_id) == []

    # And the gateway itself, given the same input, records a refusal naming every problem
    secret = add_actor("rita", ["approver"])
    template = cli.json("interrupts", "show", interrupt.id)["template"]
    contract = {**template, "actor": {"type": "human", "id": "rita"}, "input": json.loads(bad)}
    result = submit_resume(contract, secret)
    assert result.outcome == "invalid_input"
    for field in ("verdict", "verdikt", "extra"):
        assert field in result.reason


def test_a_bulk_cancel_stopped_partway_says_what_it_cancelled(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given two waiting runs, the newer of a flow this command loads, the older of one it
    # does not (so it cannot tell who operates it)
    ops = add_actor("ops", ["operator"])
    older = enqueue_run("approval", {"env": "qa"}, started_by="partial")
    waiting_on(older)
    document = tmp_path / "doc.txt"
    document.write_text("text", encoding="utf-8")
    newer = enqueue_run("cli_review", {"document": str(document)}, started_by="partial")
    waiting_on(newer)
    cli.env["INTERLUDE_FLOWS"] = "tests.flows.cli"

    # When the operator cancels both
    ran = cli.fails(
        1, "runs", "cancel", "--started-by", "partial", "--actor", "ops", "--yes", token=ops
    )

    # Then the line says what was cancelled before it stopped, not "nothing changed"
    assert "flow 'approval' is not loaded here" in ran.stderr
    assert "1 run(s) were cancelled before" in ran.stderr
    assert "nothing changed" not in ran.stderr
    assert (get_run(newer).state, get_run(older).state) == ("cancelled", "waiting")


def test_actors_are_shown_as_stored(cli: Cli) -> None:  # noqa: F811
    added = cli.json("actors", "add", "Zed.Q", "--role", "operator")
    assert (added["id"], added["roles"]) == ("zed.q", ["operator"])
    assert (
        "actor zed.q now holds roles viewer"
        in cli.ok("actors", "roles", "ZED.Q", "--role", "viewer").stdout
    )


def test_a_service_account_answers_only_as_a_service(cli: Cli) -> None:  # noqa: F811
    # Given a service account added as one, and a waiting approval
    added = cli.json("actors", "add", "approve-bot", "--role", "approver", "--kind", "service")
    bot = added["credential"]
    interrupt = waiting_on(enqueue_run("approval", {"env": "qa"}))
    resume = ("resume", interrupt.id, "--actor", "approve-bot", "--decision", "approved", "--yes")

    # When it answers as a person, then as what it is
    as_person = cli.fails(11, *resume, token=bot)
    as_service = cli.ok(*resume, "--actor-type", "service", token=bot)

    # Then the first is refused saying why, the second accepted and recorded as the service
    assert added["kind"] == "service"
    assert "approve-bot is a service, not a human" in as_person.stderr
    assert "accepted" in as_service.stdout
    assert [(a["id"], a["kind"]) for a in cli.json("actors", "list")] == [
        ("approve-bot", "service")
    ]
    assert "service" in cli.ok("actors", "list").stdout

    # And a kind set wrongly is corrected without a new credential
    said = cli.ok("actors", "kind", "Approve-Bot", "human").stdout
    assert "actor approve-bot is now a human" in said
    assert cli.json("actors", "list")[0]["kind"] == "human"
    cli.fails(2, "actors", "kind", "approve-bot", "robot")
    cli.fails(3, "actors", "kind", "nobody", "human")
