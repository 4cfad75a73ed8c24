"""1,000 interrupts due at once, swept by two sweeper processes at the same time.

Every policy must be applied exactly once: no run expired or cancelled twice, no double
escalation, no double resume. The proof is read from the events and the resume attempts.
"""

from __future__ import annotations

import base64
import json
import os
import subprocess
import sys
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import redis
from sqlalchemy import func, select

from models import runs as run_store
from models.db import transaction, utcnow
from models.tables import Event, Interrupt, ResumeAttempt, Run
from tests.flows.expiry import NOTIFIED
from tests.services import ROOT, wait_for
from worker.engine.dispatch import Notice
from worker.engine.runtime import execute
from worker.engine.tasknames import QUEUE_NOTIFY, QUEUE_RESUMES, TASK_NOTIFY, TASK_RESUME
from worker.ops.notifications import Outcome, deliver

RUNS = 1000
POLICIES = ("expire", "cancel", "escalate", "default")
SYSTEM = "system:expiry"
# The sweepers' broker: the test session's second Redis database, which no worker consumes.
UNWATCHED_BROKER = os.environ["INTERLUDE_TEST_REDIS"]
GO = "sweepers:go"
READY = "sweepers:ready"
# Each sweeper says it is ready, waits for the common signal, then sweeps until nothing is due.
SWEEPER = f"""
import os, sys, time
import redis
from worker.engine.sweeps import sweep_expired
r = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"])
r.rpush("{READY}", sys.argv[1])
while not r.exists("{GO}"):
    time.sleep(0.01)
total = 0
while True:
    handled = sweep_expired(batch=25)
    total += handled
    if handled == 0:
        break
print(total)
"""


def _suspend_runs() -> dict[str, str]:
    """RUNS runs of the ``expiring`` flow, executed by the real runtime until they wait."""
    policy_of: dict[str, str] = {}
    with transaction() as session:
        for n in range(RUNS):
            policy = POLICIES[n % len(POLICIES)]
            run = run_store.insert_run(
                session,
                flow_name="expiring",
                flow_version=1,
                input={"policy": policy, "expires_in": 1, "escalation_expires_in": 3600},
                first_step="decide",
                idempotency_key=None,
                started_by="app",
                budget=None,
            )
            policy_of[run.id] = policy
    # A few threads, as a worker's pool would: PostgreSQL commits them in groups.
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(execute, policy_of))
    return policy_of


def _published_resumes() -> Counter[str]:
    """The runs of the resume tasks the sweepers published, counted.

    They publish to a broker no worker consumes; the test executes the runs itself afterwards.
    (A worker here made the outcome depend on how fast one worker got through 250 resumes on a
    busy machine: the test's 120 s wait for them ran out under load.)
    """
    broker = redis.Redis.from_url(UNWATCHED_BROKER)
    found: Counter[str] = Counter()
    for raw in broker.lrange(QUEUE_RESUMES, 0, -1):
        message = json.loads(raw)
        assert message["headers"]["task"] == TASK_RESUME
        args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        found[args[0]] += 1
    return found


def _published_notices() -> list[Notice]:
    """The notify tasks the sweepers published (to the broker no worker consumes)."""
    broker = redis.Redis.from_url(UNWATCHED_BROKER)
    found: list[Notice] = []
    for raw in broker.lrange(QUEUE_NOTIFY, 0, -1):
        message = json.loads(raw)
        assert message["headers"]["task"] == TASK_NOTIFY
        args, kwargs, _embed = json.loads(base64.b64decode(message["body"]))
        assert args == []
        found.append(Notice(**kwargs))
    return found


def _count(*columns: Any, where: Any = None) -> Counter[tuple[Any, ...]]:
    """How many rows there are of each combination of ``columns``."""
    query = select(*columns, func.count()).group_by(*columns)
    if where is not None:
        query = query.where(where)
    with transaction(readonly=True) as session:
        rows = session.execute(query).all()
    return Counter({tuple(row[:-1]): row[-1] for row in rows})


def test_two_sweepers_apply_each_policy_exactly_once(db: str, backend: str) -> None:
    # Given 1,000 runs waiting on interrupts that are all due, four policies mixed
    policy_of = _suspend_runs()
    with transaction(readonly=True) as session:
        states = Counter(session.execute(select(Run.state)).scalars())
        last_deadline = session.execute(select(func.max(Interrupt.deadline))).scalar_one()
    assert states == {"waiting": RUNS}
    wait_for(lambda: utcnow() > last_deadline, timeout=10)
    # When two sweeper processes start sweeping at the same moment
    r = redis.Redis.from_url(os.environ["INTERLUDE_TEST_REDIS"], decode_responses=True)
    sweepers = [
        subprocess.Popen(
            [sys.executable, "-c", SWEEPER, str(n)],
            cwd=ROOT,
            env=dict(os.environ, INTERLUDE_BROKER_URL=UNWATCHED_BROKER),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for n in range(2)
    ]
    wait_for(lambda: r.llen(READY) == 2, timeout=60)
    r.set(GO, 1)
    results = [p.communicate(timeout=240) for p in sweepers]
    assert [p.returncode for p in sweepers] == [0, 0], [err[-2000:] for _, err in results]
    handled = [int(out.split()[-1]) for out, _ in results]
    # Then between them they handled every due interrupt exactly once
    assert sum(handled) == RUNS, handled
    if backend == "postgresql":
        # SKIP LOCKED lets both work at once (SQLite's single writer may serve one of them).
        assert min(handled) > 0, handled
    runs_by = Counter(policy_of.values())
    with transaction(readonly=True) as session:
        final = {row.id: row.state for row in session.execute(select(Run.id, Run.state))}
    per_policy = Counter((policy_of[run_id], state) for run_id, state in final.items())
    assert per_policy["expire", "expired"] == runs_by["expire"]
    assert per_policy["cancel", "cancelled"] == runs_by["cancel"]
    assert per_policy["escalate", "waiting"] == runs_by["escalate"]
    # And the events show one application per run, by system:expiry
    system_events = _count(Event.run_id, Event.trigger, where=Event.actor.endswith(SYSTEM))
    expected = {"expire": "expire", "cancel": "cancel", "escalate": "escalate"}
    expected["default"] = "accept_resume"
    assert Counter(system_events.values()) == {1: RUNS}
    assert {(run_id, trigger) for run_id, trigger in system_events} == {
        (run_id, expected[policy]) for run_id, policy in policy_of.items()
    }
    # And no double escalation: each escalated run has one new interrupt, at level 1, notified once
    levels = _count(Interrupt.run_id, Interrupt.escalation_level, Interrupt.status)
    escalated = [run_id for run_id, policy in policy_of.items() if policy == "escalate"]
    chains: dict[str, list[tuple[int, str]]] = {}
    for (run_id, level, status), n in sorted(levels.items()):
        chains.setdefault(run_id, []).extend([(level, status)] * n)
    assert [r for r in escalated if chains[r] != [(0, "superseded"), (1, "pending")]] == []
    # (one notify task each, for the new interrupt: the sweepers published them; executed here
    # as a worker would, they tell the flow's notifier)
    published = _published_notices()
    assert Counter(n.run_id for n in published) == dict.fromkeys(escalated, 1)
    with ThreadPoolExecutor(max_workers=4) as pool:
        outcomes = Counter(pool.map(lambda notice: deliver(notice).outcome, published))
    assert outcomes == {Outcome.NOTIFIED: len(escalated)}
    notices = Counter(
        n.split(":")[0] for n in r.lrange(NOTIFIED, 0, -1) if n.endswith(":1:manager")
    )
    assert notices == dict.fromkeys(escalated, 1)
    # And no double resume: one accepted system attempt per default interrupt...
    attempts = _count(ResumeAttempt.run_id, ResumeAttempt.outcome)
    defaults = [run_id for run_id, policy in policy_of.items() if policy == "default"]
    assert attempts == {(run_id, "accepted"): 1 for run_id in defaults}
    # ...whose continuation was published once, to the resume queue...
    assert _published_resumes() == dict.fromkeys(defaults, 1)
    # ...and each of those runs, executed as a worker would, continued once to the end
    with ThreadPoolExecutor(max_workers=4) as pool:
        list(pool.map(execute, defaults))
    assert _count(Run.state, where=Run.id.in_(defaults)) == {("succeeded",): len(defaults)}
    with transaction(readonly=True) as session:
        outputs = session.execute(select(Run.output).where(Run.id.in_(defaults))).scalars().all()
    assert {o["choice"] for o in outputs} == {"fallback"}
    claims = _count(Event.run_id, Event.trigger, where=Event.run_id.in_(defaults))
    assert {claims[run_id, "claim"] for run_id in defaults} == {3}  # decide, decide again, record
