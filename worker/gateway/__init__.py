"""The resume gateway: the checks every answer to an interrupt passes in a fixed order,
the actors who answer, and the authority an operator needs to act on a run.
"""
