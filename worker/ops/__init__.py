"""Operations: statistics and metrics, log lines about runs, purging finished runs,
notifications to responders, and starting worker processes.
"""
