"""The shared base every layer may import: the typed-config toolkit (and its YAML), JSON and JSONL
files (bounded reading, finite writing), run paths, atomic writes, whether a run directory is this
run's, the ``UserError`` root of user-facing errors, the redaction of secrets (``secrets``), and
requests to other servers bounded in time and size (``network``).

It imports nothing else of the project.
"""
