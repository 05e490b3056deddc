"""Writing a small file whole or not at all, so that a crash mid-write never leaves half of it.

Kept free of torch so that light modules (``training.run_logging``) can use it.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text_atomically(path: Path, text: str) -> None:
    """``text`` in ``path``, whole or not at all: written to a temporary file, synced, then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)
