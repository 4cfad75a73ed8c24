"""W1, the approval path: runs/s of interlude, and what one run costs the database.

    .venv/bin/python -m bench.w1 --runs 200 [--count] [--cpu] [--json]

PostgreSQL and Redis local, one ``celery -A worker worker -c 1`` (prefork, one child), and this
process as the caller: it enqueues N runs of ``bench_w1`` (one approval interrupt, then a step
with one ``ctx.effect``), waits until all N wait, resumes each through ``submit_resume`` as a
real actor with a credential (the contract built from the interrupt's view), and waits until
all N succeeded. The rate is N over the whole of it, first enqueue to last finish.

``--cpu`` adds the CPU each process spent per run (``bench.cpu``): the caller, the worker's
parent and child, PostgreSQL, Redis.

``--count`` does a separate counting run instead (slower, never timed): the worker is
``celery -A bench.counting_app worker -c 1`` and this process counts its own statements too;
the server logs every statement of the run's database and counts its transactions. Printed per
run: transactions (``pg_stat_database``), statements (the server's log, and SQLAlchemy's events
in each process), and both split by process.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import psycopg
import redis

from bench import cpu, lanes, pg
from bench.machine_cpu import busy_seconds, report_result, wait_for_go
from bench.processes import (
    BROKER_URL,
    INTERLUDE_QUEUES,
    ROOT,
    bench_env,
    exclusive,
    start_worker,
    stop_worker,
)

ACTOR = "bench-approver"
# How the worker runs its tasks: one prefork pool child per lane under one main process, one
# thread per lane in one process (``--pool threads``: the lanes share its interpreter lock),
# or one ``--pool solo`` process per lane (each takes its tasks and runs them itself).
POOLS = ("prefork", "solo", "threads")
CREDENTIAL_ENV = "BENCH_CREDENTIAL"  # a lane's caller resumes with it (a bench actor's)
DSN_ENV = "BENCH_DSN"  # and polls its runs' states here
POLL_SECONDS = 0.02
MAX_POLL_SECONDS = 0.5
CPU_HELP = "also the CPU each process spent per run (from /proc)"
TIMEOUT_SECONDS = 180  # a phase that takes longer has stalled (see broker_queues)


class Poller:
    """Counts runs by state over its own connection, and keeps count of its own queries."""

    def __init__(self, dsn: str) -> None:
        self.conn = psycopg.connect(dsn, autocommit=True)
        self.queries = 0
        self.backend_pid = int(self.conn.info.backend_pid)

    def states(self) -> dict[str, int]:
        self.queries += 1  # one statement, one transaction (autocommit)
        rows = self.conn.execute("SELECT state, count(*) FROM runs GROUP BY state").fetchall()
        return {str(state): int(n) for state, n in rows}

    def wait_for(self, state: str, runs: int) -> None:
        """Until ``runs`` runs are in ``state``. The bench's polling is work the machine does
        beside the measured one (each poll counts every run): it polls often only when the
        end is near, a quarter of what is left at the pace so far, at least every 20 ms."""
        start = time.monotonic()
        deadline = start + TIMEOUT_SECONDS
        while True:
            found = self.states()
            done = found.get(state, 0)
            if done >= runs:
                return
            bad = {s: n for s, n in found.items() if s in {"failed", "cancelled", "expired"}}
            if bad or time.monotonic() > deadline:
                raise RuntimeError(
                    f"W1 waiting for {runs} {state}: runs by state {found}; {broker_queues()}"
                )
            time.sleep(next_poll(runs - done, done, time.monotonic() - start))

    def close(self) -> None:
        self.conn.close()


def next_poll(left: int, done: int, elapsed: float) -> float:
    """Seconds before the next poll: a quarter of the time ``left`` runs take at the pace of
    the ``done`` ones so far, at least POLL_SECONDS, at most MAX_POLL_SECONDS."""
    if done <= 0:
        return POLL_SECONDS
    return min(MAX_POLL_SECONDS, max(POLL_SECONDS, left * elapsed / done / 4))


def broker_queues() -> str:
    """Where the tasks are in the broker (when runs do not move): queued, and taken unacked."""
    broker = redis.Redis.from_url(BROKER_URL)
    queued = {q: broker.llen(q) for q in INTERLUDE_QUEUES.split(",")}
    return f"in the broker: queued {queued}, unacknowledged {broker.hlen('unacked')}"


def contract(interrupt: Any) -> dict[str, Any]:
    """The approving resume contract for ``interrupt`` (an ``InterruptView``), as ACTOR."""
    from models.db import utcnow

    return {
        "schema_version": "resume.v1",
        "run_id": interrupt.run_id,
        "checkpoint_id": interrupt.checkpoint_id,
        "interrupt_id": interrupt.id,
        "actor": {"type": "human", "id": ACTOR},
        "decision": "approved",
        "input": {"note": "ok"},
        "scope": interrupt.scope,
        "evidence_hash": interrupt.evidence_hash,
        "idempotency_key": uuid.uuid4().hex,
        "expires_at": (utcnow() + timedelta(minutes=30)).isoformat(),
    }


def _workload(runs: int, credential: str, poller: Poller, *, lanes: int = 1) -> dict[str, float]:
    """The measured W1: start N, wait for N waiting, resume N, wait for N succeeded. With
    ``lanes`` callers at once, each starts and resumes its own N among the others'.

    Returns the seconds from the start at which each phase ended (the last one is the total).
    """
    from worker import enqueue_run, list_interrupts, submit_resume

    start = time.perf_counter()
    phases: dict[str, float] = {}
    own = [enqueue_run("bench_w1", {"n": i}) for i in range(runs)]
    phases["enqueued"] = time.perf_counter() - start
    poller.wait_for("waiting", runs * lanes)
    phases["waiting"] = time.perf_counter() - start
    pending = list_interrupts(status="pending", kind="approval", limit=runs * lanes)
    mine = set(own)
    for interrupt in pending if lanes == 1 else [i for i in pending if i.run_id in mine]:
        result = submit_resume(contract(interrupt), credential)
        if not result.accepted:
            raise RuntimeError(f"resume refused: {result.outcome.value} ({result.reason})")
    phases["resumed"] = time.perf_counter() - start
    poller.wait_for("succeeded", runs * lanes)
    phases["succeeded"] = time.perf_counter() - start
    return phases


def configure(url: str, counts_dir: str | None) -> None:
    """This process is the caller: point interlude at the run's database before first use."""
    env = bench_env(url, **({"BENCH_COUNTS_DIR": counts_dir} if counts_dir else {}))
    os.environ.update(env)
    from models.db import dispose_engines
    from models.settings import reset_settings

    reset_settings()
    dispose_engines()


def prepare(url: str, counts_dir: str | None = None) -> str:
    """This process as the caller of a new database at ``url``: migrated, with the bench's
    approver; its credential. The connections made for it are closed."""
    configure(url, counts_dir)
    from models.db import dispose_engines
    from models.migrate import upgrade
    from worker import add_actor

    upgrade(url)
    credential = add_actor(ACTOR, ["bench-approver"])
    dispose_engines()
    return credential


def ready_caller() -> None:
    """What an application does once, at its start, done before the clock starts: import its
    flows, build the Celery app and import the resume gateway (the first publish and the first
    resume would otherwise import them, about 0.15 s). The rivals' scripts import their
    libraries and build their graphs before their clocks start too: runs/s is not a start-up
    time. Nothing is connected or sent here."""
    import worker.gateway.submit  # noqa: F401
    from worker.app import app  # noqa: F401
    from worker.flows.flow import load_flow_modules

    load_flow_modules()


def start_workers(
    app: str, env: dict[str, str], lanes: int, pool: str
) -> list[subprocess.Popen[bytes]]:
    """The worker processes of ``lanes`` lanes: one prefork worker of ``lanes`` children, one
    worker of ``lanes`` threads, or ``lanes`` solo workers."""
    if pool == "prefork":
        return [start_worker(app, env, INTERLUDE_QUEUES, ["-c", str(lanes)])]
    if pool == "threads":
        return [start_worker(app, env, INTERLUDE_QUEUES, ["--pool", "threads", "-c", str(lanes)])]
    if pool != "solo":
        raise ValueError(f"unknown pool {pool!r}; one of {', '.join(POOLS)}")
    started: list[subprocess.Popen[bytes]] = []
    try:
        for i in range(lanes):
            solo = ["--pool", "solo", "-n", f"w1-{i}@%h"]
            started.append(start_worker(app, env, INTERLUDE_QUEUES, solo))
    except BaseException:
        for worker in started:
            stop_worker(worker)
        raise
    return started


def run(
    runs: int, *, count: bool = False, measure_cpu: bool = False, pool: str = "prefork"
) -> dict[str, Any]:
    """One W1 measurement in a database of its own, this process the caller and one lane of
    ``pool``; with ``count``, the counting run; with ``measure_cpu``, the CPU each process spent
    on it. The machine's CPU over the workload, per run, is always in the result."""
    if count:
        pg.check_log()
    redis.Redis.from_url(BROKER_URL).flushdb()
    counts_dir = tempfile.mkdtemp(prefix="bench-counts-") if count else None
    with pg.scratch_database("interlude_w1") as name:
        url = pg.sqlalchemy_url(name)
        credential = prepare(url, counts_dir)
        from models.db import dispose_engines

        ready_caller()
        if count:
            pg.log_statements(name)
            pg.quiesce(name)
        before = pg.transactions(name) if count else 0
        offset = pg.log_offset() if count else 0
        env = bench_env(url, **({"BENCH_COUNTS_DIR": counts_dir} if counts_dir else {}))
        app = "bench.counting_app" if count else "worker"
        (worker,) = start_workers(app, env, 1, pool)
        poller = Poller(pg.dsn(name))
        try:
            if count:
                from bench import counting

                counting.install("caller")
            with cpu.spent([worker.pid], enabled=measure_cpu) as spent:
                machine = busy_seconds()
                phases = _workload(runs, credential, poller)
                machine = busy_seconds() - machine
        finally:
            stop_worker(worker)
            poller.close()
            dispose_engines()
        seconds = phases["succeeded"]
        result: dict[str, Any] = {
            "runs": runs,
            "seconds": seconds,
            "rate": runs / seconds,
            "cpu_ms_per_run": 1000 * machine / runs,
            "phases": phases,
        }
        if spent:
            result["cpu"] = spent
        if count:
            from bench import counting

            counting.dump()
            pg.quiesce(name)
            xacts = pg.transactions(name) - before - poller.queries
            logged = pg.logged_statements(name, offset)
            logged.sequences.pop(poller.backend_pid, None)  # the bench's own polling
            processes = counting.load_all(counts_dir or "")
            roles: dict[str, set[int]] = {}
            for p in processes:
                roles.setdefault(p["role"], set()).update(p["backend_pids"])
            result["counts"] = pg.costs(runs, xacts, logged, roles)
            result["counts"]["sqlalchemy"] = {
                p["role"]: {
                    "transactions": (p["commits"] + p["rollbacks"]) / runs,
                    "statements": p["statements"] / runs,
                    "pings": p["pings"] / runs,
                    "compiled_cache": {k: v / runs for k, v in sorted(p["cache"].items())},
                    "compiled": {k: v / runs for k, v in sorted(p["compiled"].items())},
                }
                for p in processes
            }
    return result


def run_lanes(runs: int, lanes_: int, pool: str = "prefork") -> dict[str, Any]:
    """W1 on the whole machine: ``lanes_`` callers at once, each a process starting and
    resuming its share of ``runs``, against ``lanes_`` lanes of ``pool`` (``bench.lanes``: the
    machine's CPU per run over the timed part)."""
    if runs % lanes_:
        raise ValueError(f"{runs} runs do not share evenly among {lanes_} lanes")
    redis.Redis.from_url(BROKER_URL).flushdb()
    with pg.scratch_database("interlude_w1") as name:
        url = pg.sqlalchemy_url(name)
        credential = prepare(url)
        env = bench_env(url, **{CREDENTIAL_ENV: credential, DSN_ENV: pg.dsn(name)})
        workers = start_workers("worker", env, lanes_, pool)
        caller = [sys.executable, "-m", "bench.w1", "--caller", "--runs", str(runs // lanes_)]
        try:
            result = lanes.run(
                [[*caller, "--lanes", str(lanes_)]] * lanes_,
                env=env,
                cwd=str(ROOT),
                workers=[worker.pid for worker in workers],
            )
        finally:
            for worker in workers:
                stop_worker(worker)
    return {**result, "pool": pool}


def lane_caller(runs: int, lanes_: int) -> None:
    """One caller of ``run_lanes``: ready, then at the start signal its share of W1."""
    ready_caller()
    poller = Poller(os.environ[DSN_ENV])
    try:
        wait_for_go()
        phases = _workload(runs, os.environ[CREDENTIAL_ENV], poller, lanes=lanes_)
        report_result({"runs": runs, "seconds": phases["succeeded"], "phases": phases})
    finally:
        poller.close()


def report(result: dict[str, Any]) -> str:
    lines = [
        f"W1: {result['runs']} runs in {result['seconds']:.2f} s = {result['rate']:.1f} runs/s",
        f"  the machine's CPU per run: {result['cpu_ms_per_run']:.2f} ms",
    ]
    if "phases" in result:
        lines.append(
            "  phases ended at: "
            + ", ".join(f"{name} {at:.2f} s" for name, at in result["phases"].items())
        )
    if "cpu" in result:
        lines.append("  " + cpu.describe(result["cpu"], result["runs"], result["seconds"]))
    if "counts" in result:
        lines.append(describe_costs(result["counts"]))
    return "\n".join(lines)


def describe_costs(counts: dict[str, Any]) -> str:
    """The counting run's figures per run, as text (also used for the rivals)."""
    lines = [
        f"per run: {counts['transactions']:.2f} transactions (pg_stat_database), "
        f"{counts['statements']:.2f} statements (server log; besides them "
        f"{counts['pings']:.2f} pool pre-pings and BEGIN/COMMIT: "
        f"{counts['round_trips']:.2f} round trips)",
        "  by process (server log; SQLAlchemy's own count where installed):",
    ]
    orm = counts.get("sqlalchemy", {})
    for role, p in counts["processes"].items():
        line = (
            f"    {role:14s} {p['transactions']:5.2f} transactions, {p['statements']:5.2f} "
            f"statements, {p['pings']:5.2f} pings"
        )
        if role in orm:
            o = orm[role]
            line += (
                f"   (SQLAlchemy: {o['transactions']:.2f} commits, {o['statements']:.2f} "
                f"statements, {o['pings']:.2f} pings)"
            )
        lines.append(line)
        cache = orm.get(role, {}).get("compiled_cache")
        if cache:
            statuses = ", ".join(f"{name} {n:.2f}" for name, n in cache.items())
            # (DRIVER: executed by models.driver, compiled once, no cache lookup.)
            lines.append(f"      compiled cache per run: {statuses}")
            again = ", ".join(f"{k} {n:.2f}" for k, n in orm[role]["compiled"].items())
            lines.append(f"      compiled at execution: {again}")
    lines.append("  statements by kind (server log, per run):")
    lines.extend(f"    {n:6.2f}  {kind}" for kind, n in counts["by_kind"].items())
    return "\n".join(lines)


def rate_main(
    description: str,
    run: Callable[..., dict[str, Any]],
    label: str,
    *,
    cpu_option: bool = False,
    pool_option: bool = False,
) -> None:
    """The command of a W1 variant that only measures a rate: ``--runs N [--json]``, and
    ``--cpu`` where ``run`` takes ``measure_cpu``, ``--pool`` where it takes ``pool``."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    if cpu_option:
        parser.add_argument("--cpu", action="store_true", help=CPU_HELP)
    if pool_option:
        parser.add_argument("--pool", choices=POOLS, default="prefork", help="the worker's pool")
    args = parser.parse_args()
    options: dict[str, Any] = {"pool": args.pool} if pool_option else {}
    if getattr(args, "cpu", False):
        options["measure_cpu"] = True
    result = run(args.runs, **options)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{label}: {result['runs']} runs in {result['seconds']:.2f} s = {result['rate']:.1f} runs/s"
    )
    if "cpu" in result:
        print("  " + cpu.describe(result["cpu"], result["runs"], result["seconds"]))


def main() -> None:
    # The caller's own warnings (a publish that failed) on stderr, with their level.
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--count", action="store_true", help="the counting run (not timed)")
    parser.add_argument("--cpu", action="store_true", help=CPU_HELP)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    parser.add_argument("--pool", choices=POOLS, default="prefork", help="the worker's pool")
    parser.add_argument(
        "--lanes",
        type=int,
        default=0,
        help="the whole machine: this many callers (processes) and worker lanes at once",
    )
    parser.add_argument("--caller", action="store_true", help=argparse.SUPPRESS)  # a lane's
    args = parser.parse_args()
    if args.caller:
        lane_caller(args.runs, args.lanes)
        return
    if args.lanes:
        result = run_lanes(args.runs, args.lanes, args.pool)
    else:
        result = run(args.runs, count=args.count, measure_cpu=args.cpu, pool=args.pool)
    print(json.dumps(result) if args.json else report(result))


if __name__ == "__main__":
    with exclusive("bench.w1"):
        main()
