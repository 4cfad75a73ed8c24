"""Example flows shipped with interlude: a procurement request and a deploy gate.

Load them into a worker with ``INTERLUDE_FLOWS=examples.procurement,examples.deploy_gate``.
"""
