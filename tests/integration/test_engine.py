"""The run engine: steps executed in this process through the dispatch seam (``drain``)."""

from __future__ import annotations

import json
import threading
import time

import pytest
from sqlalchemy import select, update

from models.db import transaction, utcnow
from models.tables import Checkpoint, Event, Run
from worker import enqueue_run, get_run
from worker.testing import TaskRecorder


def _finished(run_id: str) -> bool:
    return get_run(run_id).state in {"succeeded", "failed", "cancelled", "expired"}


def test_three_step_flow_completes_with_contiguous_checkpoints(tasks: TaskRecorder) -> None:
    # Given a three-step flow started from application code
    run_id = enqueue_run("three_steps", {"n": 5})
    # When its tasks are executed until none is left
    tasks.drain()
    # Then it succeeded with the state the steps built
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.output == {"trail": ["first", "second", "third"], "n": 7}
    assert run.checkpoints == 4
    with transaction(readonly=True) as session:
        seqs = session.execute(
            select(Checkpoint.seq, Checkpoint.step)
            .where(Checkpoint.run_id == run_id)
            .order_by(Checkpoint.seq)
        ).all()
        events = session.execute(
            select(Event.trigger, Event.from_state, Event.to_state)
            .where(Event.run_id == run_id, Event.to_state.is_not(None))
            .order_by(Event.id)
        ).all()
    assert [tuple(s) for s in seqs] == [(0, None), (1, "first"), (2, "second"), (3, "third")]
    assert [tuple(e) for e in events] == [
        ("enqueue", None, "queued"),
        ("claim", "queued", "running"),
        ("advance", "running", "queued"),
        ("claim", "queued", "running"),
        ("advance", "running", "queued"),
        ("claim", "queued", "running"),
        ("complete", "running", "succeeded"),
    ]


def test_a_failing_step_is_retried_with_backoff_then_succeeds(tasks: TaskRecorder) -> None:
    run_id = enqueue_run("flaky", {"fail_times": 2})
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "succeeded", run.error
    assert run.flow_state == {"tries": 3}
    with transaction(readonly=True) as session:
        retries = (
            session.execute(
                select(Event.detail)
                .where(Event.run_id == run_id, Event.trigger == "retry")
                .order_by(Event.id)
            )
            .scalars()
            .all()
        )
    assert [d["attempt"] for d in retries] == [1, 2]
    assert "flaky failure 1" in retries[0]["error"]


def test_a_step_failing_past_its_retry_limit_fails_the_run_with_the_error(
    tasks: TaskRecorder,
) -> None:
    run_id = enqueue_run("flaky", {"fail_times": 5})
    tasks.drain()
    run = get_run(run_id)
    assert run.state == "failed"
    assert run.error == "RuntimeError: flaky failure 3"
    assert run.checkpoints == 1


def test_each_failed_attempt_hands_its_committed_failure_to_the_task(tasks: TaskRecorder) -> None:
    from worker.engine.runtime import execute

    # Given a step that fails more often than its two retries allow
    run_id = enqueue_run("flaky", {"fail_times": 5})
    reports = []
    # When each published task is executed as a worker would, once it is due
    while pending := tasks.clear():
        for task in pending:
            time.sleep(max(0.0, task.due - time.monotonic()))
            failure = execute(task.run_id)
            assert failure is not None
            # (what the database says at the moment the task would report the failure)
            reports.append((failure, get_run(run_id).state))
            with transaction(readonly=True) as session:
                row = session.get(Run, run_id)
                assert row is not None
                # No step holds the run while it waits; a retry is due only after its backoff
                assert (row.lease_owner, row.lease_expires_at) == (None, None)
                due = row.not_before is not None and row.not_before > utcnow()
                assert due is (failure.retry_in is not None)
    # Then the first two attempts report a retry and the third the failure for good, each
    # after its commit: the run is queued for the retry, or failed, before the task says so
    assert [(f.attempt, f.retry_in is not None, state) for f, state in reports] == [
        (1, True, "queued"),
        (2, True, "queued"),
        (3, False, "failed"),
    ]
    assert reports[-1][0].error == get_run(run_id).error == "RuntimeError: flaky failure 3"
    assert {(f.run_id, f.flow, f.step) for f, _ in reports} == {(run_id, "flaky", "sometimes")}
    # And every task published for it (enqueue, two retries) was labelled with flow and step
    assert [(t.flow, t.step) for t in tasks.published] == [("flaky", "sometimes")] * 3


def test_a_failed_step_keeps_its_own_traceback(
    tasks: TaskRecorder, caplog: pytest.LogCaptureFixture, capsys: pytest.CaptureFixture[str]
) -> None:
    import traceback

    from worker.cli.run_commands import last_failure
    from worker.engine.runtime import execute
    from worker.engine.tasks import report
    from worker.runs import list_events

    # Given a step that fails with a KeyError of its own (its input lacks a key)
    run_id = enqueue_run("mistaken", {})
    # When a worker executes it (no retries: it fails for good)
    with caplog.at_level("WARNING", logger="worker.engine.runtime"):
        failures = [execute(t.run_id) for t in tasks.clear()]
    assert get_run(run_id).error == "KeyError: 'mistake'"
    # Then the failure's event keeps the traceback, down to the step's line
    failed = last_failure(list_events(run_id))
    assert failed is not None and failed.trigger == "fail"
    stored = failed.detail["traceback"]
    assert 'tests/flows/engine.py", line' in stored and "in err" in stored
    assert 'mistake = ctx.input["mistake"]' in stored
    assert stored.endswith("KeyError: 'mistake'")
    # ... the worker's log line about it carries the traceback and names the run
    [record] = [r for r in caplog.records if getattr(r, "action", None) == "step_failed"]
    assert record.run_id == run_id and record.exc_info is not None
    assert "in err" in "".join(traceback.format_exception(*record.exc_info))
    # ... and the task's failure (what Flower shows) carries the step's frames
    [failure] = failures
    with pytest.raises(Exception) as raised:
        report(failure)
    shown = "".join(traceback.format_exception(raised.value))
    assert 'mistake = ctx.input["mistake"]' in shown
    assert shown.rstrip().endswith("failed (attempt 1): KeyError: 'mistake'")
    # And ``runs show --traceback`` prints it under the timeline (whose row stays one line)
    from worker.cli import main

    capsys.readouterr()
    assert main(["runs", "show", run_id, "--traceback", "--wide"]) == 0
    printed = capsys.readouterr().out
    timeline, _, after = printed.partition("traceback of step 'err', attempt 1:")
    assert 'mistake = ctx.input["mistake"]' in after and "Traceback" not in timeline
    assert main(["runs", "show", run_id, "--traceback", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["traceback"] == stored


def test_a_step_that_succeeds_or_waits_reports_no_failure(tasks: TaskRecorder) -> None:
    from worker.engine.runtime import execute

    run_id = enqueue_run("three_steps", {})
    assert [execute(t.run_id) for t in tasks.clear()] == [None]
    assert get_run(run_id).state == "succeeded"
    waiting = enqueue_run("approval", {})
    assert [execute(t.run_id) for t in tasks.clear()] == [None]
    assert get_run(waiting).state == "waiting"


def test_a_run_pinned_to_a_version_this_worker_lacks_fails_closed(db: str) -> None:
    from models import runs as run_store
    from worker.engine.runtime import execute

    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name="three_steps",
            flow_version=7,
            input={},
            first_step="first",
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        run_id = run.id
    execute(run_id)
    execute(run_id)  # a republished task meets the same refusal: recorded once
    run_view = get_run(run_id)
    assert run_view.state == "queued" and run_view.checkpoints == 1
    with transaction(readonly=True) as session:
        refused = session.execute(
            select(Event.detail)
            .where(Event.run_id == run_id, Event.trigger == "refused")
            .order_by(Event.id)
        ).scalar_one()
    assert "needs flow 'three_steps' version 7" in refused


def test_a_run_no_loaded_flow_can_continue_is_refused_once_across_republishes(
    tasks: TaskRecorder,
) -> None:
    from datetime import timedelta

    from models import runs as run_store
    from models.settings import get_settings
    from worker.engine.reaper import reap

    # Given a queued run of a version this worker lacks, refused once already
    with transaction() as session:
        run_id = run_store.insert_run(
            session,
            flow_name="three_steps",
            flow_version=7,
            input={},
            first_step="first",
            idempotency_key=None,
            started_by="test",
            budget=None,
        ).id
    from worker.engine.runtime import execute

    execute(run_id)
    # When the reaper republishes it again and again (each time a republish event between),
    # and each delivery meets the same refusal
    later = utcnow()
    for _ in range(3):
        later += timedelta(seconds=get_settings().redispatch_after * 5)
        assert reap(now=later) == 1
        assert tasks.drain() == 1
    # Then the run has one refused event, and one republish per pass
    with transaction(readonly=True) as session:
        triggers = (
            session.execute(select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id))
            .scalars()
            .all()
        )
    assert triggers.count("republish") == 3
    assert triggers.count("refused") == 1, triggers


def test_a_step_longer_than_its_lease_keeps_it_and_runs_once(tasks: TaskRecorder) -> None:
    from worker.engine.reaper import reap

    # Given a step whose lease is 2 s and which takes 5 s, and a reaper sweeping all along
    run_id = enqueue_run("slow", {"sleep": 5})
    executing = threading.Thread(target=tasks.drain, name="drain")
    executing.start()
    while not _finished(run_id) and executing.is_alive():
        reap()
        time.sleep(0.3)
    executing.join()
    # Then the worker renewed its lease: nobody requeued the run, the step ran once
    assert get_run(run_id).state == "succeeded"
    with transaction(readonly=True) as session:
        triggers = (
            session.execute(select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id))
            .scalars()
            .all()
        )
    assert "requeue" not in triggers
    assert triggers.count("claim") == 2


def _pinned_run(flow: str, version: int, first_step: str, state: dict[str, object]) -> str:
    """A queued run of an older flow version whose last checkpoint holds ``state``."""
    from models import runs as run_store

    with transaction() as session:
        run = run_store.insert_run(
            session,
            flow_name=flow,
            flow_version=version,
            input={},
            first_step=first_step,
            idempotency_key=None,
            started_by="test",
            budget=None,
        )
        session.execute(update(Checkpoint).where(Checkpoint.run_id == run.id).values(state=state))
        return run.id


def test_a_run_of_a_retired_version_continues_through_the_declared_migration(db: str) -> None:
    from worker.engine.runtime import execute

    # Given a run started on version 1, and a worker that only has version 2 (with a migration)
    run_id = _pinned_run("evolving", 1, "tally", {"total": "12.5"})
    # When the worker continues it
    execute(run_id)
    # Then its state was migrated at the step boundary, recorded, and version 2 finished it
    run = get_run(run_id)
    assert (run.state, run.flow_version) == ("succeeded", 2)
    assert run.output == {"total": 1250, "unit": "cents", "tallied_by": "v2", "closed": True}
    with transaction(readonly=True) as session:
        migrate = session.execute(
            select(Event.detail).where(Event.run_id == run_id, Event.trigger == "migrate")
        ).scalar_one()
        seqs = session.execute(
            select(Checkpoint.seq, Checkpoint.step, Checkpoint.state)
            .where(Checkpoint.run_id == run_id)
            .order_by(Checkpoint.seq)
        ).all()
    assert migrate == {"from": 1, "to": 2, "checkpoint": 1}
    assert [tuple(s)[:2] for s in seqs] == [(0, None), (1, None), (2, "tally"), (3, "close")]
    assert seqs[0].state == {"total": "12.5"}  # the old checkpoint is kept as it was
    assert seqs[1].state == {"total": 1250, "unit": "cents"}


def test_a_resuming_run_migrates_with_its_answers(db: str) -> None:
    from models import runs as run_store
    from models.tables import Run
    from worker.engine.runtime import execute

    # Given a run of version 1 that was answered (resuming) and a worker with only version 2
    run_id = _pinned_run("evolving", 1, "tally", {"total": "3"})
    with transaction() as session:
        run = session.get(Run, run_id)
        assert run is not None
        run_store.move_through(
            session, run, [("claim", {}), ("suspend", {}), ("accept_resume", {})], actor="test"
        )
    # When the worker continues it
    execute(run_id)
    # Then it migrated (no answers to carry here) and finished on version 2
    run_view = get_run(run_id)
    assert (run_view.state, run_view.flow_version) == ("succeeded", 2)
    with transaction(readonly=True) as session:
        triggers = session.execute(
            select(Event.trigger).where(Event.run_id == run_id).order_by(Event.id)
        ).scalars()
        assert "migrate" in list(triggers)


@pytest.mark.parametrize(
    ("mistake", "says"),
    [
        ("nul_state", "left state holding NUL or unpaired surrogates at 'note'"),
        ("surrogate_key", "left state holding NUL or unpaired surrogates at '\\ud800'"),
        ("nul_error", "ValueError: bad byte \\u0000 and \\ud800 here"),
        ("list_step", "returned a list, not the name of the next step or None"),
    ],
)
def test_a_step_whose_mistake_no_database_stores_fails_for_good_saying_so(
    tasks: TaskRecorder, mistake: str, says: str
) -> None:
    # (PostgreSQL refused such text at the commit: the run sat in running until the reaper)
    run_id = enqueue_run("mistaken", {"mistake": mistake})
    tasks.drain()
    run = get_run(run_id)
    assert (run.state, run.checkpoints) == ("failed", 1)
    assert says in (run.error or ""), run.error
