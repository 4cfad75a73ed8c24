"""What the command shows of a run's records, through the real console script (issue 11 D, E):
the accepted attempt however many refusals followed, every attempt a page at a time, a purge
of finished runs, and caller-supplied text that cannot forge a line of output."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

from sqlalchemy import insert

from models.db import transaction, utcnow
from models.tables import ResumeAttempt
from tests.acceptance.test_cli import Cli, cli, finished, waiting_on  # noqa: F401
from worker import add_actor, enqueue_run, submit_resume
from worker.present.safetext import escape_controls

REFUSED = 1001
FORGED = "\x1b[2J\x1b[H\r\n1999-01-01 00:00:00.000   resume accepted   human:ada   approved\u202e"


def _refusals(run_id: str, interrupt_id: str, n: int) -> None:
    """``n`` stale attempts recorded after the accepted one (as a flood of replays would)."""
    rows = [
        {
            "at": utcnow(),
            "run_id": run_id,
            "interrupt_id": interrupt_id,
            "actor_id": "mallory",
            "outcome": "stale",
            "reason": f"replay {i}: the interrupt is resolved",
            "payload": {"n": i},
        }
        for i in range(n)
    ]
    with transaction() as session:
        session.execute(insert(ResumeAttempt), rows)


def test_the_accepted_attempt_stays_in_view_and_every_attempt_pages(
    cli: Cli,  # noqa: F811
) -> None:
    # Given a run resumed once and finished, then more than 1,000 refused attempts
    secret = add_actor("ada", ["approver"])
    run_id = enqueue_run("approval", {"env": "qa"})
    interrupt = waiting_on(run_id)
    resume = ("resume", interrupt.id, "--actor", "ada", "--decision", "approved", "--yes")
    accepted_id = cli.json(*resume, token=secret)["attempt_id"]
    assert finished(run_id) == "succeeded"
    _refusals(run_id, interrupt.id, REFUSED)

    # When the operator shows the run
    shown = cli.json("runs", "show", run_id)
    text = cli.ok("runs", "show", run_id, "--wide").stdout

    # Then the accepted attempt is there, and the counts say how many of each there were
    assert accepted_id in [a["id"] for a in shown["resume_attempts"]]
    assert shown["resume_attempt_counts"] == {"accepted": 1, "stale": REFUSED}
    counts = [ln for ln in text.splitlines() if ln.startswith("resume attempts ")]
    assert counts and counts[0].endswith(f" {REFUSED + 1} (accepted 1, stale {REFUSED})")
    assert f"(attempt {accepted_id})" in text
    assert f"interlude runs attempts {run_id} lists them all" in text

    # When the operator pages through every attempt, newest first
    seen: list[int] = []
    page = cli.json("runs", "attempts", run_id[:8], "--limit", "400")
    while True:
        seen += [a["id"] for a in page["attempts"]]
        if page["next_before"] is None:
            break
        cursor = str(page["next_before"])
        page = cli.json("runs", "attempts", run_id, "--limit", "400", "--before", cursor)

    # Then each attempt came once, newest first, the accepted one last
    assert len(seen) == REFUSED + 1 and seen == sorted(seen, reverse=True)
    assert seen[-1] == accepted_id
    # And a table says where the next page starts; filters and interrupts work the same way
    first = cli.ok("runs", "attempts", run_id, "--limit", "2").stdout
    assert f"older attempts: interlude runs attempts {run_id[:8]} --before" in first
    assert "stale" in first and "mallory" in first
    only = cli.json("interrupts", "attempts", interrupt.id, "--outcome", "accepted")
    assert [a["id"] for a in only["attempts"]] == [accepted_id]
    assert only["counts"] == {"accepted": 1, "stale": REFUSED} and only["next_before"] is None
    cli.fails(2, "runs", "attempts", run_id, "--before", "x")
    cli.fails(2, "runs", "attempts", run_id, "--outcome", "approved")


def test_purge_counts_then_deletes_finished_runs(cli: Cli) -> None:  # noqa: F811
    # Given a finished run with an accepted resume and one that still waits
    secret = add_actor("ada", ["approver"])
    done = enqueue_run("approval", {"env": "qa"})
    interrupt = waiting_on(done)
    resume = ("resume", interrupt.id, "--actor", "ada", "--decision", "approved", "--yes")
    cli.json(*resume, token=secret)
    assert finished(done) == "succeeded"
    still = enqueue_run("approval", {"env": "prod"})
    waiting_on(still)
    cutoff = utcnow().isoformat()

    # When the operator purges runs finished before now, first without --yes
    dry = cli.json("purge", "--finished-before", cutoff)
    table = cli.ok("purge", "--finished-before", cutoff).stdout
    kept = cli.json("runs", "show", done)

    # Then the rows are counted per table and nothing is deleted
    assert dry["dry_run"] is True
    assert dry["would_delete"]["runs"] == 1 and dry["would_delete"]["resume_attempts"] == 1
    assert dry["would_delete"]["interrupts"] == 1 and dry["would_delete"]["events"] >= 4
    assert "nothing was deleted" in table and "checkpoints" in table
    assert kept["run"]["state"] == "succeeded"

    # When the operator purges with --yes
    purged = cli.json("purge", "--finished-before", cutoff, "--yes")

    # Then what was counted is deleted, the waiting run stays
    assert purged["dry_run"] is False and purged["deleted"] == dry["would_delete"]
    cli.fails(3, "runs", "show", done)
    assert cli.json("runs", "show", still)["run"]["state"] == "waiting"
    # And a malformed date is one line, status 2
    for bad in ("2026-13-45", "yesterday", "9" * 5000):
        ran = cli.fails(2, "purge", "--finished-before", bad)
        assert "is not a date" in ran.stderr


def _unsafe(text: str) -> list[str]:
    return [c for c in text if c != "\n" and unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}]


def test_caller_text_cannot_forge_a_line_of_output(
    cli: Cli,  # noqa: F811
    tmp_path: Path,
) -> None:
    # Given a waiting run, and an unauthenticated caller whose contract smuggles a fake line
    # and escape sequences into what is recorded (a field name the gateway quotes)
    run_id = enqueue_run("approval", {"env": "qa"})
    interrupt = waiting_on(run_id)
    template = cli.json("interrupts", "show", interrupt.id)["template"]
    forged = {**template, "actor": {"type": "human", "id": "mallory"}, FORGED: 1}
    recorded = submit_resume(forged, "ilc_not-a-credential")
    # (the gateway's reason repeats the field name with its control characters escaped)
    assert recorded.outcome == "malformed" and escape_controls(FORGED) in recorded.reason
    contract = tmp_path / "forged.json"
    contract.write_text(json.dumps(forged), encoding="utf-8")

    # When the operator looks at the run, its attempts, and resubmits the contract
    shown = cli.ok("runs", "show", run_id, "--wide").stdout
    listed = cli.ok("runs", "attempts", run_id, "--wide").stdout
    refused = cli.fails(10, "resume", "--contract", str(contract), "--yes", token="ilc_nobody")
    missing = cli.fails(3, "runs", "show", f"abcdef{FORGED[:20]}")
    as_json = cli.json("runs", "show", run_id)

    # Then no control or bidi character reached the terminal, and no line is the fake one
    for output in (shown, listed, refused.stdout, refused.stderr, missing.stderr):
        assert not _unsafe(output), [hex(ord(c)) for c in _unsafe(output)]
        assert not [ln for ln in output.splitlines() if ln.lstrip().startswith("1999-01-01")]
    assert "\\x1b[2J" in shown and "\\x1b[2J" in listed and "\\x1b[2J" in refused.stderr
    assert "\\x1b[2J" in missing.stderr
    # And JSON keeps the exact text of what was submitted (escaped JSON's own way); the reason
    # is interlude's own line, escaped where it was written
    (attempt,) = [a for a in as_json["resume_attempts"] if a["id"] == recorded.attempt_id]
    assert FORGED in attempt["payload"]
    assert attempt["reason"] == recorded.reason and attempt["reason"].isprintable()
