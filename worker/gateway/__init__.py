"""The resume gateway: the checks every answer to an interrupt passes in a fixed order,
the actors who answer, and the authority an operator needs to act on a run.

``submit`` runs the checks in order: ``parsing`` (check 1), ``actors`` (check 2),
``checks`` (4 to 8), ``acceptance`` (9); ``attempt_records`` records every attempt.
"""
