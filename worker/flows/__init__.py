"""Flow definitions: the ``Flow`` and the registry that finds flows, interrupt
declarations, input schemas, and what carries a run across flow versions.
"""
