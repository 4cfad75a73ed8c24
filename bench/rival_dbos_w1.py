"""W1 for DBOS, in one process, on its PostgreSQL system database.

Run with a Python that has dbos installed (not our dependency):
    python bench/rival_dbos_w1.py URL setup    -> creates the system database's tables
    python bench/rival_dbos_w1.py URL RUNS     -> prints {"rate": runs/s, ...}

The same shape as interlude's W1: start N workflows (each waits in ``DBOS.recv``), wait until
all N wait, ``DBOS.send`` each its approval, then wait for every result; after the message a
workflow calls one ``@DBOS.step`` as its effect. Under ``bench.lanes`` it waits for the start
signal once launched.
"""

import sys
import threading
import time

from dbos import DBOS
from machine_cpu import report_result, wait_for_go  # bench/, this script's folder

url = sys.argv[1]
setup = sys.argv[2] == "setup"
DBOS(config={"name": "rival_w1", "system_database_url": url, "run_migrations": setup})

_lock = threading.Lock()
_waiting = 0


@DBOS.step()
def record(n):
    return {"n": n, "key": f"{DBOS.workflow_id}:bench_record"}


@DBOS.workflow()
def w1(n):
    global _waiting
    with _lock:
        _waiting += 1  # in memory only: lets the caller see that this one reached recv
    answer = DBOS.recv("approval", timeout_seconds=600)
    if answer is None or answer["decision"] != "approved":
        return None
    return record(n)


def main():
    DBOS.launch()
    if setup:
        DBOS.destroy()
        return
    runs = int(sys.argv[2])
    wait_for_go()
    start = time.perf_counter()
    handles = [DBOS.start_workflow(w1, i) for i in range(runs)]
    while True:
        with _lock:
            if _waiting >= runs:
                break
        time.sleep(0.005)
    waiting = time.perf_counter()
    for handle in handles:
        DBOS.send(handle.get_workflow_id(), {"decision": "approved"}, "approval")
    for handle in handles:
        assert handle.get_result()["n"] >= 0
    seconds = time.perf_counter() - start
    result = {"runs": runs, "rate": runs / seconds, "seconds": seconds, "start": waiting - start}
    report_result(result)
    DBOS.destroy()


if __name__ == "__main__":
    main()
