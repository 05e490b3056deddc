"""The shared base every layer may import: the typed-config toolkit, run paths, atomic writes and
the ``UserError`` root of user-facing errors.

It imports nothing else of the project.
"""
