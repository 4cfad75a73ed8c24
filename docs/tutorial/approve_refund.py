"""Approve the refund of the run named on the command line, as ada of finance."""

import os
import sys
import time

from worker import ResumeContract, get_run, submit_resume

run_id = sys.argv[1]
deadline = time.monotonic() + 30
while not (run := get_run(run_id)).pending_interrupts:  # the worker is still on its first step
    assert time.monotonic() < deadline, f"run {run_id} is {run.state}, not waiting"
    time.sleep(0.2)
[interrupt] = run.pending_interrupts
print(f"{interrupt.reason}: {interrupt.evidence}")

contract = ResumeContract.for_interrupt(  # bound to the run, its checkpoint, scope and evidence
    interrupt,
    actor="ada",
    decision="approved",  # or "rejected"
    input={"ticket": "FIN-88"},  # checked against refund-approval.v1
)
result = submit_resume(contract, os.environ["INTERLUDE_ACTOR_TOKEN"])
print(result.outcome)
