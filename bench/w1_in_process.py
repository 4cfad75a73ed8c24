"""W1 in one process, without the broker: interlude's own cost, as the rivals are measured.

    .venv/bin/python -m bench.w1_in_process --runs 200 [--json]

The same workload as ``bench.w1`` (enqueue N runs of ``bench_w1``, each waits on an approval;
resume each through ``submit_resume`` as a real actor; each finishes with one ``ctx.effect``),
against PostgreSQL, but the steps and resumes run in this process: publishes go to the test
seam's recorder (``worker.testing.recording``) and ``drain()`` executes them through the code a
worker runs. No Celery, no broker, no second process: what is left is interlude's own work
(its statements, its Python), which is what LangGraph and DBOS do in their one process.

This is not how interlude runs (a worker does the steps); it says how much of ``bench.w1``'s
time is the engine and how much the broker hop (``bench.w1_floor``).
"""

from __future__ import annotations

import time
from typing import Any

from bench import pg
from bench.machine_cpu import busy_seconds
from bench.processes import exclusive
from bench.w1 import contract, prepare, rate_main


def run(runs: int) -> dict[str, Any]:
    with pg.scratch_database("interlude_w1_in_process") as name:
        url = pg.sqlalchemy_url(name)
        credential = prepare(url)
        from models.db import dispose_engines
        from worker import enqueue_run, list_interrupts, submit_resume
        from worker.flows.flow import load_flow_modules
        from worker.testing import recording

        load_flow_modules()
        try:
            with recording() as tasks:
                machine, start = busy_seconds(), time.perf_counter()
                for i in range(runs):
                    enqueue_run("bench_w1", {"n": i})
                tasks.drain()
                for interrupt in list_interrupts(status="pending", kind="approval", limit=runs):
                    result = submit_resume(contract(interrupt), credential)
                    if not result.accepted:
                        raise RuntimeError(f"resume refused: {result.outcome.value}")
                tasks.drain()
                seconds, machine = time.perf_counter() - start, busy_seconds() - machine
        finally:
            dispose_engines()
    return {
        "runs": runs,
        "seconds": seconds,
        "rate": runs / seconds,
        "cpu_ms_per_run": 1000 * machine / runs,
    }


if __name__ == "__main__":
    with exclusive("bench.w1_in_process"):
        rate_main(__doc__ or "", run, "W1 in one process")
