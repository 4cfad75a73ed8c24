"""Property tests: whatever is thrown at ``submit_resume`` (random JSON, random text, mutated
contracts, swapped arguments, contracts re-pointed in one bound field), it never raises, records
exactly one attempt per call, changes no run unless the outcome is ``accepted``, and accepts
only a contract bound exactly to a pending interrupt (run, checkpoint, interrupt, scope,
evidence hash) for the actor whose credential was given.

The examples of one test share a database on purpose (that is why the function-scoped fixture
health check is suppressed): every example compares the whole database with a snapshot taken
right before it, and replaces a run that an accepted example released.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from sqlalchemy import func, select

from models.canonical import evidence_hash
from models.contracts import InterruptView, ResumeResult
from models.db import transaction, utcnow
from models.enums import TERMINAL_STATES
from models.identity import normal_actor_id
from models.tables import Checkpoint, Interrupt, ResumeAttempt, Run
from tests.resumes import contract_for, drain_finished, drain_pending
from worker import add_actor, enqueue_run, submit_resume
from worker.gateway.parsing import MAX_PAYLOAD_CHARS
from worker.testing import TaskRecorder

EXAMPLES = 100
# The property over every kind of input: at least 2,000 examples per backend. Bounded in time:
# an example that takes seconds is a lock wait or a hang, not noise (one takes milliseconds),
# and the whole test stays well under a minute on a quiet machine.
PROPERTY_EXAMPLES = 2_000
EXAMPLE_DEADLINE = timedelta(seconds=10)
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
PROPERTY = settings(
    SETTINGS,
    max_examples=PROPERTY_EXAMPLES,
    deadline=EXAMPLE_DEADLINE,
    # Each example builds on the database the previous ones left: replaying a stored failure
    # against a fresh stage proves nothing, so shrinking is the only reuse.
    database=None,
)
TERMINAL = [state.value for state in TERMINAL_STATES]
# The runs on stage differ in scope and evidence; 1240.0 hashes differently under RFC 8785
# ("1240") and under the pre-RFC json.dumps form ("1240.0").
STAGE_INPUTS = [
    {"env": "prod", "diff": "v1"},
    {"env": "staging", "diff": 1240.0},
    {"env": "prod", "diff": "v2"},
]

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
    """Runs waiting on an interrupt, and the actors who may or may not release them: alice
    and ann approve, bob only views."""

    credentials: dict[str, str]
    waiting: list[InterruptView] = field(default_factory=list)
    inputs: Any = field(default_factory=lambda: itertools.cycle(STAGE_INPUTS))
    # Every id a run, checkpoint or interrupt on stage has had (for re-pointed contracts).
    ids: list[str] = field(default_factory=list)
    # What the last example left, if it passed and released nothing: the next one's "before".
    # Nothing else writes between examples (tasks run only when drained).
    left: Snapshot | None = None

    def start(self) -> None:
        interrupt = drain_pending(enqueue_run("approval", dict(next(self.inputs))))
        self.waiting.append(interrupt)
        self.ids += [interrupt.run_id, interrupt.checkpoint_id, interrupt.id]

    def replace(self, run_id: str) -> None:
        """An accepted example released ``run_id``: let it finish, start another in its place."""
        assert drain_finished(run_id) == "succeeded"
        self.waiting = [i for i in self.waiting if i.run_id != run_id]
        self.start()


@pytest.fixture()
def stage(db: str, tasks: TaskRecorder) -> Stage:
    credentials = {
        "alice": add_actor("alice", ["approver"]),
        "ann": add_actor("ann", ["approver"]),
        "bob": add_actor("bob", ["viewer"]),
    }
    staged = Stage(credentials)
    for _ in STAGE_INPUTS:
        staged.start()
    return staged


@dataclass
class Snapshot:
    """What a refusal must leave as it was, read in one transaction: every unfinished run
    with its checkpoints and interrupts, row by row; a summary of the finished ones (how many,
    their versions, checkpoints and pending interrupts), which keeps each example's cost flat
    as accepted examples leave finished runs behind; and how many attempts are recorded."""

    world: dict[str, Any]
    attempts: int
    attempt: ResumeAttempt | None = None


def _snapshot(attempt_id: int | None = None) -> Snapshot:
    by_run: dict[str, Any] = {}
    with transaction(readonly=True) as session:
        # Core rows, not ORM objects: two snapshots per example, and thousands of examples.
        unfinished = select(Run.id).where(Run.state.not_in(TERMINAL))
        runs = Run.__table__
        for row in session.execute(select(runs).where(runs.c.id.in_(unfinished))):
            by_run.setdefault(row.id, []).append(("runs", dict(row._mapping)))
        for table in (Checkpoint.__table__, Interrupt.__table__):
            for row in session.execute(select(table).where(table.c.run_id.in_(unfinished))):
                by_run.setdefault(row.run_id, []).append((table.name, dict(row._mapping)))
        finished = select(Run.id).where(Run.state.in_(TERMINAL))
        summary = session.execute(
            select(
                select(func.count()).where(Run.state.in_(TERMINAL)).scalar_subquery(),
                select(func.coalesce(func.sum(Run.state_version), 0))
                .where(Run.state.in_(TERMINAL))
                .scalar_subquery(),
                select(func.count())
                .select_from(Checkpoint)
                .where(Checkpoint.run_id.in_(finished))
                .scalar_subquery(),
                select(func.count())
                .select_from(Interrupt)
                .where(Interrupt.run_id.in_(finished), Interrupt.status == "pending")
                .scalar_subquery(),
                select(func.count()).select_from(ResumeAttempt).scalar_subquery(),
            )
        ).one()
        attempt = session.get(ResumeAttempt, attempt_id) if attempt_id is not None else None
        if attempt is not None:
            session.expunge(attempt)
    world = {run_id: sorted(found, key=repr) for run_id, found in by_run.items()}
    world["finished runs"] = tuple(summary[:-1])
    return Snapshot(world, int(summary[-1]), attempt)


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


def _strings(value: Any) -> list[str]:
    """Every text of ``value``, its keys too, as given: where a credential would be redacted
    (looked for in the JSON text instead, one with a control character was not found there,
    escaped as it is)."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [text for item in value for text in _strings(item)]
    if isinstance(value, dict):
        return [text for k, v in value.items() for text in [str(k), *_strings(v)]]
    return []


def _numbers_as_floats(value: Any) -> Any:
    """JSONB keeps numbers as decimals: 8.4e16 comes back as an int, so compare as floats."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, list):
        return [_numbers_as_floats(v) for v in value]
    return {k: _numbers_as_floats(v) for k, v in value.items()}


def _submit_and_check(
    stage: Stage, contract: Any, credential: Any, *, swapped: bool = False
) -> ResumeResult:
    before, stage.left = stage.left or _snapshot(), None
    # When anything is submitted (the two arguments the wrong way round, too), Then no
    # exception escapes ...
    first, second = (credential, contract) if swapped else (contract, credential)
    result = submit_resume(first, second)
    # ... exactly one attempt is recorded, with its outcome ...
    after = _snapshot(result.attempt_id)
    assert after.attempts == before.attempts + 1
    row = after.attempt
    assert row is not None, "the attempt was not recorded"
    assert row.outcome == result.outcome
    # ... no credential on stage is stored as it was given, wherever the caller put it ...
    stored = json.dumps([row.payload, row.reason, row.run_id, row.interrupt_id, row.actor_id])
    for secret in stage.credentials.values():
        assert secret not in stored, "a credential was stored"
    if swapped:
        contract, credential = credential, contract
    # ... (and the payload, when storable) ...
    if isinstance(contract, dict) and _json_clean(contract) and not swapped:
        submitted = _strings(contract)
        if (
            isinstance(credential, str)
            and len(credential) >= 8
            and any(credential in text for text in submitted)
        ):
            # A credential inside the submission is redacted wherever it is stored (the
            # fuzzer sometimes draws the same text for a field and for the credential).
            assert credential not in json.dumps(row.payload)
        else:
            assert _numbers_as_floats(row.payload) == _numbers_as_floats(contract)
    # ... and no run moved, unless this attempt was accepted and then only the one it named.
    if result.accepted:
        assert result.run_id is not None
        assert after.world[result.run_id] != before.world[result.run_id]
        after.world.pop(result.run_id)
        before.world.pop(result.run_id)
    assert after.world == before.world, f"{result.outcome}: {result.reason}"
    if result.accepted:
        assert result.run_id is not None
        stage.replace(result.run_id)
    else:
        stage.left = Snapshot(after.world, after.attempts)
    return result


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


BOUND = ("run_id", "checkpoint_id", "interrupt_id", "scope", "evidence_hash", "actor")


def _fullwidth(text: str) -> str:
    """``text`` in full-width letters: another string, the same actor id after NFKC."""
    return "".join(chr(ord(c) + 0xFEE0) if "!" <= c <= "~" else c for c in text)


def _near(text: str) -> list[str]:
    """Strings a careless comparison might take for ``text``."""
    flipped = text[:-1] + chr(ord(text[-1]) ^ 1)
    return [text.upper(), text + " ", " " + text, text[:-1], flipped, text[:6], _fullwidth(text)]


def _repointed(stage: Stage, target: InterruptView, what: str) -> st.SearchStrategy[Any]:
    """Values for bound field ``what`` of a contract for ``target``: other records' values,
    near misses of its own, and junk."""
    others = [i for i in stage.waiting if i.id != target.id]
    if what in ("run_id", "checkpoint_id", "interrupt_id"):
        own = {"run_id": target.run_id, "checkpoint_id": target.checkpoint_id}.get(what, target.id)
        # Drawn by position: the list grows as examples release runs, and hypothesis wants the
        # same choices to mean the same kind of draw in every example.
        any_id = st.integers(min_value=0, max_value=2**16).map(
            lambda i: stage.ids[i % len(stage.ids)]
        )
        return st.one_of(any_id, st.sampled_from(_near(own)), awkward_text, json_values)
    if what == "scope":
        scope = dict(target.scope)
        near = [
            {**scope, "env": scope["env"].upper()},
            {**scope, "env": scope["env"] + " "},
            {**scope, "extra": True},
            {k: v for k, v in scope.items() if k != "env"},
            [scope],
            json.dumps(scope),
            None,
        ]
        return st.one_of(st.sampled_from([i.scope for i in others] + near), json_values)
    if what == "evidence_hash":
        digest = target.evidence_hash
        near = [
            digest.upper(),
            digest.removeprefix("sha256:"),
            evidence_hash(target.evidence, canon=None),  # the pre-RFC 8785 form of it
            evidence_hash({}),
            *_near(digest),
        ]
        return st.one_of(st.sampled_from([i.evidence_hash for i in others] + near), awkward_text)
    # The actor: others (an approver among them, who did not give this credential), ids
    # interlude keeps for itself, near misses, and spellings that are alice after all.
    ids = ["ann", "bob", "carol", "alic", "alice2", "system:expiry", "worker:w1", "", "a" * 201]
    same = ["ALICE", " alice ", _fullwidth("alice")]
    return st.one_of(
        st.sampled_from(ids + same + _near("alice")).map(lambda i: {"type": "human", "id": i}),
        st.just({"type": "human", "id": "alice", "extra": 1}),
        json_values,
    )


def _bound_to_a_pending_interrupt(
    waiting: list[InterruptView], contract: Any, credential: Any, alice: str
) -> bool:
    """Whether ``contract`` is exactly the contract of one of ``waiting`` for the actor whose
    credential was given (alice: the only approver whose credential the examples give)."""
    if not isinstance(contract, dict) or credential != alice:
        return False
    actor = contract.get("actor")
    if not isinstance(actor, dict) or not isinstance(actor.get("id"), str):
        return False
    if normal_actor_id(actor["id"]) != "alice":
        return False
    return any(
        (contract.get("run_id"), contract.get("checkpoint_id"), contract.get("interrupt_id"))
        == (i.run_id, i.checkpoint_id, i.id)
        and contract.get("evidence_hash") == i.evidence_hash
        and json.dumps(contract.get("scope"), sort_keys=True) == json.dumps(i.scope, sort_keys=True)
        for i in waiting
    )


KINDS = ["json", "text", "swapped", "mutated", "repointed", "repointed", "repointed", "exact"]


@PROPERTY
@given(data=st.data())
def test_whatever_is_submitted_is_recorded_and_only_an_exact_contract_is_accepted(
    stage: Stage, data: st.DataObject
) -> None:
    # Given one of the waiting runs, and something to submit for it
    waiting = list(stage.waiting)
    alice = stage.credentials["alice"]
    target = data.draw(st.sampled_from(waiting), label="target")
    kind = data.draw(st.sampled_from(KINDS), label="kind")
    swapped = False
    if kind == "json":
        # random JSON, with a credential on stage or random text
        contract = data.draw(json_values)
        holder = data.draw(st.one_of(st.sampled_from(["alice", "bob"]), scalars))
        credential = stage.credentials.get(holder, holder) if isinstance(holder, str) else holder
    elif kind == "text":
        # random strings, the text of a valid contract among them
        contract = data.draw(
            st.one_of(awkward_text, st.text(), st.just(json.dumps(contract_for(target, "alice"))))
        )
        credential = alice
    elif kind == "swapped":
        # the credential where the contract goes and the contract where the credential goes
        swapped = True
        contract, credential = contract_for(target, "alice"), alice
    elif kind == "mutated":
        # a valid contract, fields dropped, added or replaced, under one of several credentials
        holder = data.draw(st.sampled_from(["alice", "alice", "bob", "nobody"]))
        contract = _apply(
            contract_for(target, "bob" if holder == "bob" else "alice"),
            data.draw(_mutations(stage)),
        )
        credential = stage.credentials.get(holder) or data.draw(scalars)
    elif kind == "repointed":
        # alice's valid contract with one to three bound fields changed, her own credential
        contract = contract_for(target, "alice")
        for what in data.draw(st.lists(st.sampled_from(BOUND), min_size=1, max_size=3)):
            contract[what] = data.draw(_repointed(stage, target, what), label=what)
        credential = alice
    else:
        # the positive control: the valid contract, as alice might spell her id
        spelled = data.draw(st.sampled_from(["alice", "Alice", " ALICE", _fullwidth("alice")]))
        contract, credential = contract_for(target, spelled), alice
    # When it is submitted, Then it is one recorded attempt and no run moves unless accepted
    result = _submit_and_check(stage, contract, credential, swapped=swapped)
    event(f"{kind}: {result.outcome}")
    # And only a contract bound exactly to a pending interrupt, for its actor, is accepted
    if result.accepted:
        assert not swapped
        assert _bound_to_a_pending_interrupt(waiting, contract, credential, alice), result.reason
    if kind == "exact":
        assert result.accepted, f"{result.outcome}: {result.reason}"
    if kind in ("json", "text", "swapped"):
        assert result.outcome == "malformed", result.reason


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
