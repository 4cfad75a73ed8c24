"""Start a refund, as your application would, and print the run's id."""

from worker import enqueue_run

run_id = enqueue_run(
    "refund",
    {"customer": "C-17", "amount": 42.5},
    idempotency_key="refund-C-17-0042",  # the same key starts the same run, once
)
print(run_id)
