"""The broker's own commands on Redis: kombu's transport against interlude's, in one process.

    .venv/bin/python -m bench.redis_clients [--messages 2000] [--rounds 5] [--json]

kombu's Redis channel builds a new redis-py client for each command it sends outside the
worker's event loop; interlude's transport (``worker/engine/redis_transport.py``) keeps one per
channel. This bench does what a W1 task costs the broker's clients, through each transport in
turn: publish N task messages with ``send_task``, each with its task-sent event (the caller's
part), then take each from the queue and acknowledge it (the worker's: recorded as unacked,
then removed). It prints, per message, the CPU this process spent and the redis-py clients it
built, the median of the rounds, and the ratio of the two transports' CPU. One process, CPU
time, transports taking turns: the machine's load moves both alike.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
import uuid
from typing import Any

import redis
from celery import Celery
from kombu import Connection, Consumer, Exchange, Producer, Queue  # type: ignore[attr-defined]

from bench.processes import BROKER_URL, exclusive, floor_app

KOMBU = "kombu.transport.redis:Transport"
INTERLUDE = "worker.engine.redis_transport:Transport"
NAME = "bench.redis_clients"
QUEUE = Queue(NAME, Exchange(NAME, type="direct"), routing_key=NAME)  # type: ignore[no-untyped-call]


class ClientCount:
    """Counts the redis-py clients built while it is installed (``redis.Redis.__init__``)."""

    def __init__(self) -> None:
        self.built = 0
        self._init = redis.Redis.__init__

    def __enter__(self) -> ClientCount:
        init = self._init

        def counted(client: redis.Redis, *args: Any, **kwargs: Any) -> None:
            self.built += 1
            init(client, *args, **kwargs)

        redis.Redis.__init__ = counted  # type: ignore[method-assign]
        return self

    def __exit__(self, *exc: object) -> None:
        redis.Redis.__init__ = self._init  # type: ignore[method-assign]


def round_trip(app: Celery, conn: Connection, messages: int) -> list[Any]:
    """Publish ``messages`` tasks of ``app`` (with their task-sent events) on one channel of
    ``conn``, then take and acknowledge each; the tasks' args, in the order taken."""
    channel = conn.channel()
    try:
        QUEUE(channel).declare()
        producer = Producer(channel)  # type: ignore[no-untyped-call]
        for n in range(messages):
            app.send_task(
                f"{NAME}.noop", args=[n], task_id=uuid.uuid4().hex, producer=producer, queue=QUEUE
            )
        taken: list[Any] = []
        consumer = Consumer(  # type: ignore[no-untyped-call]
            channel, [QUEUE], callbacks=[lambda _body, m: taken.append(m)], accept=["json"]
        )
        args = []
        with consumer:
            for _ in range(messages):
                conn.drain_events(timeout=5)
                message = taken.pop()
                args.append(message.payload[0])
                message.ack()
        return args
    finally:
        channel.close()


def one_round(app: Celery, transport: str, messages: int) -> dict[str, float]:
    """N messages through ``transport`` (``round_trip``): CPU (ms) and redis-py clients
    built, per message."""
    connection = Connection(BROKER_URL, transport=transport)  # type: ignore[no-untyped-call]
    with connection as conn, ClientCount() as count:
        start = time.process_time()
        round_trip(app, conn, messages)
        spent = time.process_time() - start
    return {"cpu_ms": spent * 1000 / messages, "clients": count.built / messages}


def run(messages: int, rounds: int) -> dict[str, Any]:
    # (Task-sent events on: a message's publish is measured with its event, as before.)
    app = floor_app("bench_redis_clients", NAME, task_events=True)
    redis.Redis.from_url(BROKER_URL).flushdb()
    found: dict[str, list[dict[str, float]]] = {KOMBU: [], INTERLUDE: []}
    one_round(app, KOMBU, 50)  # warm-up: imports, connections, scripts
    one_round(app, INTERLUDE, 50)
    for _ in range(rounds):
        for transport in (KOMBU, INTERLUDE):
            found[transport].append(one_round(app, transport, messages))
    redis.Redis.from_url(BROKER_URL).flushdb()
    result: dict[str, Any] = {"messages": messages, "rounds": rounds}
    for transport, label in ((KOMBU, "kombu"), (INTERLUDE, "interlude")):
        result[label] = {
            "cpu_ms": statistics.median(r["cpu_ms"] for r in found[transport]),
            "cpu_ms_rounds": [r["cpu_ms"] for r in found[transport]],
            "clients": statistics.median(r["clients"] for r in found[transport]),
        }
    result["cpu_ratio"] = result["interlude"]["cpu_ms"] / result["kombu"]["cpu_ms"]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--messages", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", action="store_true", help="print the result as JSON")
    args = parser.parse_args()
    with exclusive("bench.redis_clients"):
        result = run(args.messages, args.rounds)
    if args.json:
        print(json.dumps(result))
        return
    print(
        f"{result['messages']} task messages per round, {result['rounds']} rounds: publish "
        "(with its task-sent event), take, acknowledge; per message, median of rounds"
    )
    for label in ("kombu", "interlude"):
        r = result[label]
        rounds = ", ".join(f"{ms:.3f}" for ms in r["cpu_ms_rounds"])
        print(
            f"  {label:<9} transport: {r['cpu_ms']:.3f} ms CPU ({rounds}), "
            f"{r['clients']:.2f} redis-py clients built"
        )
    print(f"  interlude ÷ kombu, CPU per message: {result['cpu_ratio']:.2f}")


if __name__ == "__main__":
    main()
