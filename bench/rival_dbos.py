"""DBOS: a durable workflow of three steps on PostgreSQL, runs one after another.

Run with a Python that has dbos installed (not our dependency):
    python bench/rival_dbos.py postgresql://postgres@127.0.0.1/DB RUNS  -> prints runs/s
"""

import sys
import time

from dbos import DBOS

url = sys.argv[1]
n = int(sys.argv[2])
DBOS(config={"name": "rival", "system_database_url": url})


@DBOS.step()
def a(s):
    return [*s, "first"]


@DBOS.step()
def b(s):
    return [*s, "second"]


@DBOS.step()
def c(s):
    return [*s, "third"]


@DBOS.workflow()
def flow():
    return c(b(a([])))


DBOS.launch()
t = time.perf_counter()
for _i in range(n):
    flow()
print(f"{n / (time.perf_counter() - t):.1f}")
DBOS.destroy()
