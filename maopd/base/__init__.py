"""The shared base every layer may import: the typed-config toolkit, run paths and atomic writes.

It imports nothing else of the project.
"""
