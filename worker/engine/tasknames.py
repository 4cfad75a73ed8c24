"""The names of interlude's Celery tasks and queues.

A module of their own, apart from the app: code that only names a task (the dispatch seam and
the test recorder) then does not import Celery.
"""

from __future__ import annotations

TASK_STEP = "interlude.run_step"
TASK_RESUME = "interlude.resume_run"
TASK_SWEEP = "interlude.sweep_expired"
TASK_REAP = "interlude.reap"
TASK_NOTIFY = "interlude.notify"

QUEUE_STEPS = "interlude.steps"
QUEUE_RESUMES = "interlude.resumes"
QUEUE_MAINTENANCE = "interlude.maintenance"
# Notifiers call people's systems (webhooks, mail): a queue of its own, so that they can be
# given a worker of their own and watched apart, which every worker started without -Q takes.
QUEUE_NOTIFY = "interlude.notify"

# A step or resume task's message header naming the flow of the run it was published for: the
# claim then sends that flow's steps only, not every step the worker has loaded (a parameter
# the server parses at every claim). Workers that do not know it ignore it; a task without it
# is claimed against every step, as before.
FLOW_HEADER = "interlude_flow"
