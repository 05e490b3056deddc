"""Fingerprints of inputs by content: what a settings file records so that a resume notices a file
rewritten in place (same path, other content).

``content_fingerprint(path)`` is the SHA-256 of a file's bytes, or for a directory (a model) of
each file's relative name and bytes, in sorted order; symbolic links inside are followed as the
reader would follow them. Reading is streamed, so a model of several GB costs its read time, not
its size in memory.

``input_fingerprints`` records a run's input files so, and ``changed_input`` names the first whose
content differs from such a record (``maopd eval run``'s settings file, a training run's
``inputs.json``).
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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


def input_fingerprints(files: Mapping[str, str | os.PathLike | None]) -> dict[str, dict[str, str]]:
    """``{name: {"file": path, "sha256": content fingerprint}}`` for each of ``files`` that exists
    (a hub id or an endpoint's model has no file, and an unset input none)."""
    return {
        name: {"file": str(file), "sha256": content_fingerprint(file)}
        for name, file in files.items()
        if file is not None and Path(file).exists()
    }


@dataclass(frozen=True)
class ChangedInput:
    """An input whose content differs from the one recorded: its name, its file, the fingerprint
    recorded (or that none was) and the one it has now."""

    name: str
    file: str
    was: str
    now: str

    @property
    def label(self) -> str:
        return self.name.replace("_", " ")


def changed_input(recorded: Any, now: Mapping[str, Mapping[str, str]]) -> ChangedInput | None:
    """The first input of ``now`` (``input_fingerprints``' form) whose content differs from what
    ``recorded`` (the same form, as read back from a file) holds for it, or None. Inputs are compared
    by content, not by path: an input moved but unchanged is the same input."""
    recorded = recorded if isinstance(recorded, dict) else {}
    for name, entry in now.items():
        before = recorded.get(name) if isinstance(recorded.get(name), dict) else {}
        if before.get("sha256") != entry["sha256"]:
            was = before.get("sha256") or "no fingerprint recorded"
            return ChangedInput(name, entry["file"], was, entry["sha256"])
    return None
