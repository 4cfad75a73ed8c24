"""Celery's broker_transport_options for interlude: what every process that talks to the broker
(a worker, a caller, the benches' floors) is given, kept apart from ``worker.app`` so that a
process can take them without building interlude's Celery app."""

from __future__ import annotations

from typing import Any

from models.settings import Settings

# Seconds a command to Redis (a publish) or a connection to it may take before it fails.
BROKER_SOCKET_TIMEOUT = 5.0


def broker_options(settings: Settings) -> dict[str, Any]:
    """Celery's broker_transport_options: interlude's for the broker's kind, and over them
    ``INTERLUDE_BROKER_TRANSPORT_OPTIONS``."""
    return {**_own_broker_options(settings), **settings.broker_transport_options}


def _own_broker_options(settings: Settings) -> dict[str, Any]:
    if settings.broker_url.startswith("filesystem://"):
        folder = settings.broker_folder
        for sub in ("queue", "processed", "control"):
            (folder / sub).mkdir(parents=True, exist_ok=True)
        return {
            "data_folder_in": str(folder / "queue"),
            "data_folder_out": str(folder / "queue"),
            "processed_folder": str(folder / "processed"),
            # Exchange bindings live here; kombu's default is ./control in the working directory.
            "control_folder": str(folder / "control"),
            "store_processed": False,
        }
    # Redis: no acknowledgement emulation. With it, kombu records each message a worker takes in
    # Redis and deletes the record at the acknowledgement: two more round trips per task in the
    # worker's main process, between one task and the next (W1: 8 of 12 alternating pairs
    # faster, median of the pairs 1.27x; docs/explanation/performance.md). What it buys is a
    # message given back an hour after its whole worker died, which interlude does not need: the
    # runs table holds what to do, and the reaper requeues a dead worker's runs once their lease
    # expires and republishes dispatches nobody claimed. A pool child that dies still gets its
    # task requeued by the main process (``task_reject_on_worker_lost``). (Other transports
    # ignore the option.)
    # Socket timeouts: redis-py's default is none, so a broker that stops answering (frozen,
    # or cut off by the network) held every publish, the one after a step's commit or a
    # resume's included, for as long as it lasted. A publish that fails is no loss: the run
    # row is the outbox, and the reaper publishes it again. (The worker's own wait for
    # messages is a BRPOP of one second, read when the socket is readable: not affected.)
    if settings.broker_url.startswith(("redis://", "rediss://")):
        return {
            "ack_emulation": False,
            "socket_timeout": BROKER_SOCKET_TIMEOUT,
            "socket_connect_timeout": BROKER_SOCKET_TIMEOUT,
            "socket_keepalive": True,
        }
    return {"ack_emulation": False}
