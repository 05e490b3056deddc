"""The shared base every layer may import: the typed-config toolkit, run paths, atomic writes and
whether a run directory is this run's.

It imports nothing else of the project.
"""
