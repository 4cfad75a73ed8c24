"""LangGraph with its PostgreSQL checkpointer: a three-node graph, runs one after another.

Run with a Python that has langgraph and langgraph-checkpoint-postgres (not our dependencies):
    python bench/rival_langgraph.py postgresql://postgres@127.0.0.1/DB RUNS [sync|exit]
prints runs/s. ``sync`` (the default here) persists every step before the next, as interlude
and DBOS do; ``exit`` persists only when the graph stops.
"""

import sys
import time
import uuid
from typing import TypedDict

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph


class S(TypedDict):
    trail: list


def a(s):
    return {"trail": ["first"]}


def b(s):
    return {"trail": s["trail"] + ["second"]}


def c(s):
    return {"trail": s["trail"] + ["third"]}


g = StateGraph(S)
g.add_node("a", a)
g.add_node("b", b)
g.add_node("c", c)
g.add_edge(START, "a")
g.add_edge("a", "b")
g.add_edge("b", "c")
g.add_edge("c", END)
url = sys.argv[1]
n = int(sys.argv[2])
durability = sys.argv[3] if len(sys.argv) > 3 else "sync"
with PostgresSaver.from_conn_string(url) as saver:
    saver.setup()
    app = g.compile(checkpointer=saver)
    t = time.perf_counter()
    for _i in range(n):
        app.invoke(
            {"trail": []},
            {"configurable": {"thread_id": uuid.uuid4().hex}},
            # LangGraph's default, "async", may lose the latest checkpoint in a crash.
            durability=durability,
        )
    print(f"{n / (time.perf_counter() - t):.1f}")
