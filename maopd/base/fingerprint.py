"""Fingerprints of inputs by content: what a settings file records so that a resume notices a file
rewritten in place (same path, other content).

``content_fingerprint(path)`` is the SHA-256 of a file's bytes, or for a directory (a model) of
each file's relative name and bytes, in sorted order; symbolic links inside are followed as the
reader would follow them. Reading is streamed, so a model of several GB costs its read time, not
its size in memory.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

_BLOCK_BYTES = 1 << 20


def _update(digest, path: Path) -> None:
    with path.open("rb") as handle:
        while block := handle.read(_BLOCK_BYTES):
            digest.update(block)


def content_fingerprint(path: str | os.PathLike) -> str:
    """``sha256:<hex>`` of ``path``'s content (a file, or every file below a directory with its name)."""
    path = Path(path)
    digest = hashlib.sha256()
    if path.is_dir():
        for file in sorted(p for p in path.rglob("*") if p.is_file()):
            digest.update(file.relative_to(path).as_posix().encode("utf-8") + b"\0")
            digest.update(str(file.stat().st_size).encode() + b"\0")
            _update(digest, file)
    else:
        _update(digest, path)
    return f"sha256:{digest.hexdigest()}"
