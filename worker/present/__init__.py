"""What the command line and the web both show people and read from them: a run's
timeline, ages and times, text made safe to print, JSON that people type. Below both;
imports neither.
"""
