"""Property tests: whatever is thrown at ``submit_resume``, it answers with a recorded outcome
and changes no run unless that outcome is ``accepted``.

The examples of one test share a database on purpose (that is why the function-scoped fixture
health check is suppressed): every example compares the whole database with a snapshot taken
right before it, and replaces a run that an accepted example released.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import select

from models.contracts import InterruptView, ResumeResult
from models.db import transaction, utcnow
from models.tables import Checkpoint, Interrupt, ResumeAttempt, Run
from tests.resumes import contract_for, drain_finished, drain_pending
from worker import add_actor, enqueue_run, submit_resume
from worker.gateway import MAX_PAYLOAD_CHARS
from worker.testing import TaskRecorder

EXAMPLES = 100
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

# Text the databases refuse to store (NUL, a lone surrogate) next to ordinary text.
awkward_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["\x00", "a\x00b", "\ud800", "x\udfff", "é✓", " ", "resume.v1"]),
)
scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True, allow_infinity=True),
    awkward_text,
)
json_values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=4),
        st.dictionaries(awkward_text, children, max_size=4),
    ),
    max_leaves=12,
)


@dataclass
class Stage:
    """Runs waiting on an interrupt, and the actors who may or may not release them."""

    credentials: dict[str, str]
    waiting: list[InterruptView] = field(default_factory=list)

    def replace(self, run_id: str) -> None:
        """An accepted example released ``run_id``: let it finish, start another in its place."""
        assert drain_finished(run_id) == "succeeded"
        self.waiting = [i for i in self.waiting if i.run_id != run_id]
        self.waiting.append(_waiting_run())


def _waiting_run() -> InterruptView:
    return drain_pending(enqueue_run("approval", {"env": "prod"}))


@pytest.fixture()
def stage(db: str, tasks: TaskRecorder) -> Stage:
    credentials = {"alice": add_actor("alice", ["approver"]), "bob": add_actor("bob", ["viewer"])}
    return Stage(credentials, [_waiting_run(), _waiting_run()])


def _world() -> dict[str, Any]:
    """Every run, checkpoint and interrupt, by run: what a refusal must leave as it was."""
    by_run: dict[str, Any] = {}
    with transaction(readonly=True) as session:
        for table in (Run, Checkpoint, Interrupt):
            for row in session.execute(select(table)).scalars():
                run_id = row.id if table is Run else row.run_id
                columns = {c.key: getattr(row, c.key) for c in table.__table__.columns}
                by_run.setdefault(run_id, []).append((table.__tablename__, columns))
    return {run_id: sorted(rows, key=repr) for run_id, rows in by_run.items()}


def _recorded(result: ResumeResult) -> ResumeAttempt:
    with transaction(readonly=True) as session:
        row = session.get(ResumeAttempt, result.attempt_id)
        assert row is not None, "the attempt was not recorded"
        session.expunge(row)
        return row


def _json_clean(value: Any) -> bool:
    """True when ``value`` is JSON both databases can store as it is."""
    try:
        text = json.dumps(value, allow_nan=False)
    except (TypeError, ValueError):
        return False
    clean = "\\u0000" not in text and "\\ud" not in text.lower()
    return clean and len(text) <= MAX_PAYLOAD_CHARS


def _numbers_as_floats(value: Any) -> Any:
    """JSONB keeps numbers as decimals: 8.4e16 comes back as an int, so compare as floats."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    return {k: _numbers_as_floats(v) for k, v in value.items()}


def _submit_and_check(stage: Stage, contract: Any, credential: Any) -> ResumeResult:
    before = _world()
    # When anything is submitted, Then no exception escapes ...
    result = submit_resume(contract, credential)
    # ... the attempt is recorded with its outcome (and with the payload, when storable) ...
    row = _recorded(result)
    assert row.outcome == result.outcome
    if isinstance(contract, dict) and _json_clean(contract):
        submitted = json.dumps(contract)
        if isinstance(credential, str) and len(credential) >= 8 and credential in submitted:
            # A credential inside the submission is redacted wherever it is stored (the
            # fuzzer sometimes draws the same text for a field and for the credential).
            assert credential not in json.dumps(row.payload)
        else:
            assert _numbers_as_floats(row.payload) == _numbers_as_floats(contract)
    after = _world()
    # ... and no run moved, unless this attempt was accepted and then only the one it named.
    if result.accepted:
        assert result.run_id is not None
        assert after[result.run_id] != before[result.run_id]
        after.pop(result.run_id)
        before.pop(result.run_id)
    assert after == before, f"{result.outcome}: {result.reason}"
    if result.accepted:
        assert result.run_id is not None
        stage.replace(result.run_id)
    return result


@SETTINGS
@given(contract=json_values, credential=st.one_of(st.sampled_from(["alice", "bob"]), scalars))
def test_arbitrary_json_is_a_recorded_refusal(stage: Stage, contract: Any, credential: Any) -> None:
    secret = stage.credentials.get(credential, credential) if isinstance(credential, str) else None
    result = _submit_and_check(stage, contract, secret if secret is not None else credential)
    assert result.outcome == "malformed"


def _mutations(stage: Stage) -> st.SearchStrategy[list[tuple[str, Any]]]:
    fields = [
        "schema_version",
        "run_id",
        "checkpoint_id",
        "interrupt_id",
        "actor",
        "decision",
        "input",
        "scope",
        "evidence_hash",
        "idempotency_key",
        "expires_at",
        "policy_version",
    ]
    real_ids = st.sampled_from(
        [i.run_id for i in stage.waiting]
        + [i.checkpoint_id for i in stage.waiting]
        + [i.id for i in stage.waiting]
    )
    mutation = st.one_of(
        st.tuples(st.just("drop"), st.sampled_from(fields)),
        st.tuples(st.just("extra"), awkward_text),
        st.tuples(st.sampled_from(fields), json_values),
        st.tuples(st.sampled_from(["run_id", "checkpoint_id", "interrupt_id"]), real_ids),
        st.tuples(st.just("decision"), st.sampled_from(["approved", "rejected"])),
        st.tuples(
            st.just("input"),
            st.fixed_dictionaries(
                {},
                optional={
                    "comment": st.one_of(awkward_text, st.integers()),
                    "amount_limit": st.one_of(st.none(), st.integers(), awkward_text),
                },
            ),
        ),
        st.tuples(
            st.just("expires_at"),
            st.sampled_from([-3600, -1, 60, 10**6]).map(
                lambda s: (utcnow() + timedelta(seconds=s)).isoformat()
            ),
        ),
        st.tuples(st.just("actor"), st.sampled_from(["alice", "bob", "carol"])),
        st.tuples(st.just("idempotency_key"), st.sampled_from(["reused-key", "other-key"])),
    )
    return st.lists(mutation, min_size=1, max_size=3)


def _apply(contract: dict[str, Any], mutations: list[tuple[str, Any]]) -> dict[str, Any]:
    mutated = dict(contract)
    for what, value in mutations:
        if what == "drop":
            mutated.pop(value, None)
        elif what == "extra":
            mutated[value or "extra"] = "surprise"
        elif what == "actor" and isinstance(value, str) and value in {"alice", "bob", "carol"}:
            mutated["actor"] = {"type": "human", "id": value}
        else:
            mutated[what] = value
    return mutated


@SETTINGS
@given(data=st.data())
def test_mutated_contracts_never_change_a_run_unless_accepted(
    stage: Stage, data: st.DataObject
) -> None:
    # Given a valid contract for one of the waiting runs, and one of several credentials
    target = data.draw(st.sampled_from(stage.waiting))
    holder = data.draw(st.sampled_from(["alice", "alice", "bob", "nobody"]))
    contract = contract_for(target, "bob" if holder == "bob" else "alice")
    mutated = _apply(contract, data.draw(_mutations(stage)))
    credential = stage.credentials.get(holder) or data.draw(scalars)
    # When it is submitted, Then the outcome is recorded and only an acceptance moves a run
    result = _submit_and_check(stage, mutated, credential)
    event(f"outcome: {result.outcome}")
    if result.accepted:
        assert holder == "alice"
        assert isinstance(mutated.get("actor"), dict)
        assert mutated["actor"]["id"] == "alice"


def test_floats_that_are_not_json_are_refused(stage: Stage) -> None:
    contract = contract_for(stage.waiting[0], "alice", input={"amount_limit": math.nan})
    result = _submit_and_check(stage, contract, stage.credentials["alice"])
    assert result.outcome == "malformed"
    assert "not JSON" in result.reason


def test_text_the_database_cannot_store_is_refused_and_kept_escaped(stage: Stage) -> None:
    contract = contract_for(stage.waiting[0], "alice", input={"comment": "a\x00b\ud800"})
    result = _submit_and_check(stage, contract, stage.credentials["alice"])
    assert result.outcome == "malformed"
    payload = _recorded(result).payload
    assert payload["input"] == {"comment": "a\\u0000b\\ud800"}
    assert payload["interrupt_id"] == stage.waiting[0].id


def test_an_oversized_contract_is_refused_and_kept_truncated(stage: Stage) -> None:
    contract = contract_for(stage.waiting[0], "alice", input={"comment": "x" * 100_000})
    result = _submit_and_check(stage, contract, stage.credentials["alice"])
    assert result.outcome == "malformed"
    assert "larger than" in result.reason
    row = _recorded(result)
    assert len(json.dumps(row.payload)) < MAX_PAYLOAD_CHARS + 1000
    assert row.interrupt_id == stage.waiting[0].id


def test_objects_that_are_not_json_are_refused(stage: Stage) -> None:
    result = _submit_and_check(stage, {"run_id": object()}, stage.credentials["alice"])
    assert result.outcome == "malformed"
    assert _recorded(result).payload["unparseable"].startswith("{'run_id': <object")
