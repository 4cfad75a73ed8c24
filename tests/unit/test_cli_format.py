"""The command's parts that need no services: ages, tables, exit statuses, parsing, templates."""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from models.canonical import evidence_hash
from models.contracts import EventView, InterruptView, ResumeAttemptView, ResumeContract
from models.enums import ResumeOutcome
from models.errors import (
    ActorError,
    ActorExistsError,
    ActorNotFoundError,
    ConfigurationError,
    InterruptNotFoundError,
    InvalidInputError,
    InvalidTransitionError,
    OperatorDeniedError,
    OperatorUnauthenticatedError,
    RunNotFoundError,
    StaleStateError,
    UnknownFlowError,
)
from worker.cli import build_parser, main
from worker.cli.exits import EPILOG, RESUME_EXIT, status_of
from worker.cli.interrupt_commands import contract
from worker.cli.ops_commands import figures
from worker.cli.output import Output, flatten
from worker.present.formats import compact, format_age, jsonable, until
from worker.present.timeline import timeline

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [
        (-5, "0s"),
        (0, "0s"),
        (59.9, "59s"),
        (60, "1m00s"),
        (245, "4m05s"),
        (3600, "1h00m"),
        (3 * 3600 + 12 * 60 + 30, "3h12m"),
        (2 * 86400 + 4 * 3600 + 59, "2d04h"),
    ],
)
def test_ages_read_like_people_say_them(seconds: float, shown: str) -> None:
    assert format_age(seconds) == shown


def test_deadlines_read_as_ahead_or_overdue_and_naive_times_are_utc() -> None:
    assert until(NOW + timedelta(minutes=59), now=NOW) == "in 59m00s"
    assert until(NOW - timedelta(seconds=190), now=NOW) == "overdue 3m10s"
    # SQLite hands back naive datetimes; they mean UTC.
    assert until(NOW.replace(tzinfo=None) + timedelta(hours=2), now=NOW) == "in 2h00m"
    assert jsonable({"at": NOW.replace(tzinfo=None)}) == {"at": "2030-01-01T12:00:00+00:00"}


def test_results_of_unknown_shape_flatten_to_dotted_names() -> None:
    assert flatten({"a": 1, "b": {"c": 2, "d": {"e": None}}, "f": {}}) == [
        ("a", 1),
        ("b.c", 2),
        ("b.d.e", None),
        ("f", {}),
    ]
    assert flatten(7) == [("value", 7)]
    cut = compact({"k": "x" * 200}, limit=20)
    assert len(cut) == 20 and cut.startswith('{"k": "xx') and cut.endswith("…")
    assert compact(None) == "-"


def test_tables_keep_text_literal_and_drop_trailing_blanks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    Output().table(["name", "note"], [("[bold]x[/bold]", "a"), ("y", "a much longer note")])
    lines = capsys.readouterr().out.splitlines()
    assert "[bold]x[/bold]" in lines[2]
    assert all(line == line.rstrip() for line in lines)
    assert lines[2].index("a") == lines[3].index("a much")


def test_every_refused_outcome_has_its_own_status_and_is_documented() -> None:
    assert set(RESUME_EXIT) == set(ResumeOutcome)
    assert RESUME_EXIT[ResumeOutcome.ACCEPTED] == RESUME_EXIT[ResumeOutcome.DUPLICATE] == 0
    assert RESUME_EXIT[ResumeOutcome.KEPT] == 0  # an event kept until its run asks
    refused = [status for outcome, status in RESUME_EXIT.items() if status]
    assert len(refused) == len(set(refused)) == len(ResumeOutcome) - 3
    assert not set(refused) & {0, 1, 2, 3, 4, 5}
    for outcome, status in RESUME_EXIT.items():
        if status:
            assert f"{status:<3} resume refused: {outcome.value}" in EPILOG


@pytest.mark.parametrize(
    ("error", "status"),
    [
        (RunNotFoundError(run_id="r"), 3),
        (InterruptNotFoundError(interrupt_id="i"), 3),
        (UnknownFlowError(flow="f", known="none"), 3),
        (ActorNotFoundError(actor_id="a"), 3),
        (InvalidTransitionError(run_id="r", trigger="cancel", found="succeeded"), 4),
        (StaleStateError(run_id="r", expected="a", found="b"), 4),
        (ActorExistsError(actor_id="a"), 4),
        (ActorError(actor_id="a", detail="at least one role is required"), 2),
        (InvalidInputError(detail="x"), 2),
        (ConfigurationError(detail="x"), 1),
        # A refused cancel, pause or retry exits as a resume refused for the same reason.
        (OperatorUnauthenticatedError(action="cancel", run_id="r", outcome="-", reason="x"), 11),
        (OperatorDeniedError(action="pause", run_id="r", outcome="-", reason="x"), 14),
    ],
)
def test_errors_map_to_exit_statuses(error: Exception, status: int) -> None:
    assert status_of(error) == status  # type: ignore[arg-type]


def _verbs(parser: argparse.ArgumentParser, path: list[str]) -> list[list[str]]:
    found = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found += _verbs(sub, [*path, name])
    return found or [path]


def test_every_verb_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    verbs = _verbs(build_parser(), [])
    assert {" ".join(v) for v in verbs} == {
        *(f"runs {v}" for v in ("start", "list", "show", "cancel", "pause", "retry", "wait")),
        *(f"runs {v}" for v in ("steps", "result", "fork")),
        "events send",
        "runs attempts",
        "interrupts list",
        "interrupts show",
        "interrupts attempts",
        "purge",
        "resume",
        "resume-many",
        *(f"links {v}" for v in ("issue", "list", "revoke")),
        *(f"contacts {v}" for v in ("add", "remove", "list")),
        *(f"actors {v}" for v in ("add", "list", "revoke", "rotate", "roles", "kind")),
        *(f"db {v}" for v in ("upgrade", "current", "history", "check")),
        "flows list",
        "flows check",
        *("sweep", "reap", "stats", "metrics", "demo", "serve"),
    }
    for verb in verbs:
        assert main([*verb, "--help"]) == 0
        out = capsys.readouterr().out
        assert out.startswith(f"usage: interlude {' '.join(verb)}"), out
        if verb not in (["metrics"], ["demo"]):
            assert "--json" in out, verb


@pytest.mark.parametrize(
    "argv",
    [
        [],
        ["runs"],
        ["runs", "cancel", "r1"],
        ["runs", "list", "--limit", "0"],
        ["resume", "i1", "--decision", "maybe"],
        ["resume", "--contract", "f.json", "--expires-in", "-5"],
        ["actors", "add", "carol"],
        ["metrics", "--port", "70000"],
        ["nonsense"],
        # Out of bounds (issue 11 F): refused while parsing, before anything is read or written
        ["runs", "list", "--limit", "9" * 5000],
        ["runs", "list", "--older-than", "9" * 400 + "d"],
        ["resume", "i1", "--expires-in", "1e308"],
        ["runs", "wait", "r1", "--timeout", "inf"],
        ["serve", "--port", "9" * 5000],
        ["runs", "show", "r" * 65],
        ["purge", "--finished-before", "2026-13-45"],
        ["purge", "--finished-before", "2999-01-01"],
        ["purge"],
    ],
)
def test_a_bad_command_line_is_one_line_and_status_2(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    # "interlude" once: the verb names where it went wrong, not the program again.
    assert captured.err.startswith("interlude: error: ")
    assert not captured.err.startswith("interlude: error: interlude")
    assert "--help" in captured.err


@pytest.mark.parametrize(
    ("argv", "status", "says"),
    [
        (["resume", "i1", "--actor", "a", "--decision", "approved", "--input", "[1]"], 2, "object"),
        (["resume", "i1", "--actor", "a", "--yes"], 2, "needs --decision"),
        (["resume", "i1", "--contract", "c.json"], 2, "cannot be combined with INTERRUPT_ID"),
        (["resume", "--contract", "c.json", "--actor", "a"], 2, "combined with --actor"),
        (["resume", "--contract", "/no/such.json", "--yes"], 2, "cannot read /no/such.json"),
        (["runs", "start", "approval", "--input", "@/no/such.json"], 2, "/no/such.json"),
        (["runs", "start", "no_such_flow"], 3, "unknown flow 'no_such_flow'"),
        (["runs", "list", "--state", "sleeping"], 2, "unknown state 'sleeping'"),
        (["interrupts", "list", "--kind", "sleeping"], 2, "unknown kind 'sleeping'"),
        (["interrupts", "list", "--status", "done"], 2, "unknown status 'done'"),
        (["actors", "add", "no spaces!", "--role", "viewer"], 2, "id may only hold"),
    ],
)
def test_bad_input_is_refused_before_the_database_is_reached(
    argv: list[str],
    status: int,
    says: str,
    no_database: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(argv) == status
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1 and says in captured.err, captured.err
    assert not no_database.exists()


def test_people_read_ages_and_rates_in_generic_results() -> None:
    rows = dict(
        figures(
            {
                "oldest_waiting_age_seconds": 11_520.0,
                "stale_rejection_rate": 0.125,
                "resume_attempts": {"stale": 1},
                "median_waiting_age_seconds": None,
            }
        )
    )
    assert rows == {
        "oldest_waiting_age": "3h12m",
        "stale_rejection_rate": "12.5%",
        "resume_attempts.stale": "1",
        "median_waiting_age_seconds": "-",
    }


def _interrupt(**fields: object) -> InterruptView:
    values: dict[str, object] = {
        "id": "i" * 32,
        "run_id": "r" * 32,
        "name": "approve",
        "kind": "approval",
        "status": "pending",
        "reason": "",
        "step": "gate",
        "checkpoint_id": "c" * 32,
        "state_version": 4,
        "flow_version": 1,
        "schema_name": "approval",
        "schema_version": 1,
        "json_schema": {},
        "roles": ["approver"],
        "scope": {"env": "prod"},
        "evidence": {"diff": "v1"},
        "evidence_hash": evidence_hash({"diff": "v1"}),
        "separate_from_starter": False,
        "deadline": NOW,
        "on_expiry": "expire",
        "escalation": None,
        "escalation_level": 0,
        "default_input": None,
        "supersedes": None,
        "superseded_by": None,
        "previous_input": None,
        "decision": None,
        "resume_input": None,
        "resolved_by": None,
        "created_at": NOW,
        "resolved_at": None,
    }
    values.update(fields)
    return InterruptView.model_validate(values)


def test_the_contract_is_bound_to_what_the_interrupt_shows() -> None:
    interrupt = _interrupt()
    built = contract(interrupt, actor_id="alice", decision="rejected", input={"comment": "no"})
    parsed = ResumeContract.model_validate(built)
    assert (parsed.run_id, parsed.checkpoint_id, parsed.interrupt_id) == (
        interrupt.run_id,
        interrupt.checkpoint_id,
        interrupt.id,
    )
    assert parsed.scope == {"env": "prod"}
    assert parsed.evidence_hash == interrupt.evidence_hash
    assert parsed.expires_at > datetime.now(UTC)
    # Two contracts built without a key never share one.
    assert contract(interrupt, actor_id="a")["idempotency_key"] != built["idempotency_key"]
    # A renewed review offers the input given before.
    renewed = _interrupt(previous_input={"comment": "yes"}, default_input={"comment": "d"})
    assert contract(renewed, actor_id="a")["input"] == {"comment": "yes"}
    assert contract(_interrupt(default_input={"comment": "d"}), actor_id="a")["input"] == {
        "comment": "d"
    }


def test_the_timeline_is_chronological_and_causal_within_a_moment() -> None:
    interrupt = _interrupt(
        created_at=NOW, resolved_at=NOW + timedelta(seconds=5), status="resolved"
    )
    interrupt = interrupt.model_copy(update={"decision": "approved", "resolved_by": "alice"})
    attempt = ResumeAttemptView(
        id=1,
        at=NOW + timedelta(seconds=5),
        run_id=interrupt.run_id,
        interrupt_id=interrupt.id,
        actor_id="alice",
        idempotency_key="k",
        outcome="accepted",
        reason="approved by human:alice",
        payload={},
    )
    event = EventView(
        id=9,
        at=(NOW + timedelta(seconds=5)).replace(tzinfo=None),
        actor="human:alice",
        trigger="accept_resume",
        from_state="waiting",
        to_state="resuming",
        detail={},
    )
    entries = timeline([], [event], [], [interrupt], [attempt])
    assert [e.what for e in entries] == [
        "interrupt approval",
        "accept_resume waiting → resuming",
        "interrupt resolved",
        "resume accepted",
    ]
    assert entries[2].actor == "human:alice"


def test_help_lists_allowed_values_and_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", "list", "--help"]) == 0
    runs = " ".join(capsys.readouterr().out.split())
    assert main(["interrupts", "list", "--help"]) == 0
    interrupts = " ".join(capsys.readouterr().out.split())
    assert "queued, running, waiting, resuming, succeeded, failed, expired, cancelled" in runs
    assert "(default: 50)" in runs
    assert "approval, evidence, event, repair, budget, operator" in interrupts
    assert "pending, resolved, expired, superseded, cancelled" in interrupts


def test_importing_worker_and_parsing_a_command_load_nothing_heavy() -> None:
    # Start-up cost is what these imports would add; their absence is checked, not timed.
    import subprocess
    import sys

    heavy = ("celery", "sqlalchemy", "pydantic", "rich", "kombu", "prometheus_client")
    probe = (
        "import sys, worker, worker.cli as c; c.build_parser().parse_args(['runs', 'list']); "
        f"print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "[]", done.stdout


def test_a_verb_that_publishes_nothing_does_not_build_the_celery_app(tmp_path: Path) -> None:
    # Listing runs reads the database only: Celery (a third of a second to import) is left out.
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'interlude.db'}"
    probe = (
        "import sys, worker.cli as c; status = c.main(['runs', 'list', '--json']); "
        "print([m for m in ('celery', 'kombu') if m in sys.modules], status)"
    )
    env = {**os.environ, "INTERLUDE_DATABASE_URL": url}
    subprocess.run(
        [sys.executable, "-c", "import worker.cli as c; c.main(['db', 'upgrade'])"],
        env=env,
        check=True,
        timeout=60,
        capture_output=True,
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.stdout.strip().splitlines()[-1] == "[] 0", done.stdout + done.stderr


def test_one_resume_is_one_row_and_actors_are_written_one_way() -> None:
    interrupt = _interrupt(
        created_at=NOW, resolved_at=NOW + timedelta(seconds=5), status="resolved"
    ).model_copy(update={"decision": "approved", "resolved_by": "human:alice"})

    def event(id: int, seconds: int, actor: str, trigger: str, **detail: object) -> EventView:
        return EventView(
            id=id,
            at=NOW + timedelta(seconds=seconds),
            actor=actor,
            trigger=trigger,
            from_state=None,
            to_state=None,
            detail=detail,
        )

    events = [
        event(1, 0, "worker:w1", "claim", epoch=1, step="check"),
        event(2, 0, "worker:w1", "interrupt", interrupt_id=interrupt.id),
        event(3, 5, "human:alice", "accept_resume", interrupt_id=interrupt.id),
        event(4, 9, "system:reaper", "republish", state="resuming"),
        event(5, 9, "ops", "cancel", reason="x" * 200),
    ]
    attempt = ResumeAttemptView(
        id=7,
        at=NOW + timedelta(seconds=5),
        run_id=interrupt.run_id,
        interrupt_id=interrupt.id,
        actor_id="alice",
        idempotency_key="k",
        outcome="accepted",
        reason="approved by human:alice",
        payload={"actor": {"type": "human", "id": "alice"}},
    )
    refused = attempt.model_copy(update={"id": 6, "outcome": "denied", "reason": "no role"})
    entries = timeline([], events, [], [interrupt], [refused, attempt])

    assert [e.what for e in entries] == [
        "claim",
        "interrupt",
        "accept_resume",
        "resume denied",
        "republish",
        "cancel",
    ]
    assert [e.actor for e in entries] == [
        "worker:w1",
        "worker:w1",
        "human:alice",
        "human:alice",
        "system:reaper",
        "human:ops",
    ]
    assert "attempt 7" in entries[2].detail and "approved" in entries[2].detail
    assert "roles approver" in entries[1].detail
    # Details are whole here; only the table cuts them (unless --wide).
    assert "x" * 200 in entries[-1].detail
    assert len(Output().cut(entries[-1].detail)) == 80
    assert Output(wide=True).cut(entries[-1].detail) == entries[-1].detail


def test_tables_show_short_ids_and_wide_shows_them_whole() -> None:
    assert Output().id("ad1e2d" + "0" * 26) == "ad1e2d00"
    assert Output(wide=True).id("ad1e2d" + "0" * 26) == "ad1e2d" + "0" * 26


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("15m", 900), ("12h", 43200), ("7d", 604800), ("1.5h", 5400)],
)
def test_durations_read_like_people_write_them(text: str, seconds: float) -> None:
    from worker.cli.run_actions import duration

    assert duration(text).total_seconds() == seconds


def test_a_duration_that_is_not_one_is_refused() -> None:
    from worker.cli.run_actions import duration

    with pytest.raises(argparse.ArgumentTypeError, match="like 90s, 15m"):
        duration("7 days")
