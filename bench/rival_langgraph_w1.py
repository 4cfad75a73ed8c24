"""W1 for LangGraph with its PostgreSQL checkpointer, in one process.

Run with a Python that has langgraph and langgraph-checkpoint-postgres (not our dependencies):
    python bench/rival_langgraph_w1.py URL setup           -> creates the checkpointer's tables
    python bench/rival_langgraph_w1.py URL RUNS sync|exit  -> prints {"rate": runs/s, ...}

The same shape as interlude's W1: start N threads (each stops in ``interrupt()`` in its first
node), then resume each with ``Command(resume=...)`` (its final node makes the "effect"), one
after another. Under ``bench.lanes`` it waits for the start signal once ready (its graph
compiled, its connection open). ``durability="sync"`` persists every step before the next
one; ``"exit"`` persists only when the graph stops (at the interrupt and at the end).
"""

import sys
import time
import uuid
from typing import TypedDict

from langgraph.checkpoint.postgres import PostgresSaver
from langgraph.graph import END, START, StateGraph
from langgraph.types import Command, interrupt
from machine_cpu import report_result, wait_for_go  # bench/, this script's folder


class State(TypedDict, total=False):
    n: int
    approved: bool
    receipt: dict


def record(n, *, idempotency_key):
    return {"n": n, "key": idempotency_key}


def ask(state):
    answer = interrupt({"kind": "approval", "roles": ["bench-approver"], "evidence": state["n"]})
    return {"approved": answer["decision"] == "approved"}


def apply(state, config):
    key = f"{config['configurable']['thread_id']}:bench_record"
    return {"receipt": record(state["n"], idempotency_key=key)}


def graph():
    g = StateGraph(State)
    g.add_node("ask", ask)
    g.add_node("apply", apply)
    g.add_edge(START, "ask")
    g.add_edge("ask", "apply")
    g.add_edge("apply", END)
    return g


def main():
    url = sys.argv[1]
    with PostgresSaver.from_conn_string(url) as saver:
        if sys.argv[2] == "setup":
            saver.setup()
            return
        runs, durability = int(sys.argv[2]), sys.argv[3]
        app = graph().compile(checkpointer=saver)
        threads = [{"configurable": {"thread_id": uuid.uuid4().hex}} for _ in range(runs)]
        wait_for_go()
        start = time.perf_counter()
        for i, config in enumerate(threads):
            out = app.invoke({"n": i}, config, durability=durability)
            assert "__interrupt__" in out, out
        waiting = time.perf_counter()
        for config in threads:
            answer = {"decision": "approved", "input": {"note": "ok"}}
            out = app.invoke(Command(resume=answer), config, durability=durability)
            assert out["approved"] and out["receipt"]["n"] >= 0, out
        seconds = time.perf_counter() - start
        result = {"runs": runs, "rate": runs / seconds, "seconds": seconds}
        report_result({**result, "start": waiting - start})


if __name__ == "__main__":
    main()
