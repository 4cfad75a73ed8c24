"""``python -m bench.chaos --minutes M --seed S``: the chaos run (see ``bench/chaos/__init__``)."""

from __future__ import annotations

import argparse
import logging
import os
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

from bench.chaos.cluster import Broker, Cluster, RedisBroker

RUNS_PER_MINUTE = 30
# After the last fault: how long the runs may take to finish before the rest count as stuck.
DRAIN_SECONDS = 180.0
TERMINAL = ("succeeded", "failed", "cancelled", "expired")


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m bench.chaos", description=__doc__)
    parser.add_argument("--minutes", type=float, default=2.0, help="how long faults go on")
    parser.add_argument("--seed", type=int, default=1, help="seeds the faults and the resumer")
    parser.add_argument("--runs", type=int, help=f"runs to start (default {RUNS_PER_MINUTE}/min)")
    parser.add_argument("--broker", choices=("redis", "rabbitmq"), default="redis")
    args = parser.parse_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.runs is None:
        args.runs = max(1, round(RUNS_PER_MINUTE * args.minutes))
    return args


def make_broker(kind: str, directory: Path) -> Broker:
    if kind == "rabbitmq":
        from tests.acceptance.private_services import PrivateRabbit

        return PrivateRabbit()
    return RedisBroker(directory)


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    logging.basicConfig(level=logging.ERROR, format="%(asctime)s %(message)s")
    logging.getLogger("bench.chaos").setLevel(logging.INFO)
    directory = Path(tempfile.mkdtemp(prefix="chaos-"))
    cluster = Cluster(make_broker(args.broker, directory), directory)
    began = time.monotonic()
    try:
        cluster.start()
        return _drive(cluster, args, began)
    finally:
        cluster.stop()


def _drive(cluster: Cluster, args: argparse.Namespace, began: float) -> int:
    env = cluster.env()
    for name in ("INTERLUDE_DATABASE_URL", "INTERLUDE_BROKER_URL", "INTERLUDE_FLOWS"):
        os.environ[name] = env[name]
    os.environ["CHAOS_TARGET_URL"] = env["CHAOS_TARGET_URL"]
    from models.settings import reset_settings

    reset_settings()
    # Imported only now: the Celery app reads the broker URL when it is first imported.
    from sqlalchemy import create_engine, func, select

    from bench.chaos.faults import Injector
    from bench.chaos.report import examine, render
    from bench.chaos.traffic import Traffic, retrying
    from models.tables import Run

    stop = threading.Event()
    window = args.minutes * 60
    traffic = Traffic(seed=args.seed, runs=args.runs, window=window * 0.8)
    retrying(traffic.enrol, stop)
    engine = create_engine(cluster.postgres.url, pool_pre_ping=True)
    injector = Injector(cluster, engine, random.Random(args.seed))
    faults_until = time.monotonic() + window
    threads = [
        threading.Thread(target=traffic.start_runs, args=(stop,), name="starter"),
        threading.Thread(target=traffic.resume, args=(stop,), name="resumer", daemon=True),
        threading.Thread(target=traffic.operate, args=(stop,), name="operator", daemon=True),
        threading.Thread(target=injector.run, args=(faults_until, stop), name="faults"),
    ]
    for thread in threads:
        thread.start()
    threads[0].join()
    threads[3].join()

    def finished() -> int:
        try:
            with engine.connect() as conn:
                return int(
                    conn.execute(
                        select(func.count())
                        .select_from(Run)
                        .where(Run.id.in_(list(traffic.started.values())))
                        .where(Run.state.in_(TERMINAL))
                    ).scalar_one()
                )
        except Exception:
            return -1

    drain_until = time.monotonic() + DRAIN_SECONDS
    while finished() < len(traffic.started) and time.monotonic() < drain_until:
        time.sleep(1)
    stop.set()
    for thread in threads[1:3]:
        thread.join(30)
    found = examine(engine, traffic, injector.faults)
    found.injection_errors = injector.errors
    header = (
        f"chaos run: --minutes {args.minutes:g} --seed {args.seed} --broker {args.broker}; "
        f"{args.runs} runs, 2 workers -c 2 and beat on private servers; "
        f"{time.monotonic() - began:.0f}s in all"
    )
    print(render(found, traffic, header), flush=True)
    engine.dispose()
    return 1 if found.violations() else 0


if __name__ == "__main__":
    sys.exit(main())
