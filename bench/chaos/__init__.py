"""A chaos run anyone can repeat: faults at random under real load, then what they broke.

``python -m bench.chaos --minutes M --seed S`` (or ``make chaos``) starts its own Redis and
PostgreSQL on free ports, two workers (``-c 2``) and beat, and a flow with an approval and
two effects. A starter starts runs, a resumer answers approvals (once, repeated, concurrently),
an operator answers repairs, while a seeded injector SIGKILLs or SIGSTOPs workers and pool
children and restarts the broker, PostgreSQL and beat. It prints what it found
(``bench.chaos.report``) and exits non-zero on any violation.
"""
