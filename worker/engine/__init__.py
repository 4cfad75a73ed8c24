"""The engine: one step of a run (claim, execute, commit fenced on the lease epoch), the
effect ledger, publishing after commit, the Celery tasks, and the sweeps and the reaper
that finish what stopped.
"""
