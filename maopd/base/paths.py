"""Paths the project writes: kept inside the run directory.

A run directory is data, possibly someone else's: a path it holds (the ``checkpoints/latest``
pointer, a ``step_N`` symlink) must not lead a run to read or load anything outside it. Every path
read from a run directory goes through ``resolve_inside`` (``training.checkpoint``); the paths a run
writes are built by the code from ``run_dir`` and checked names (stages, variants), never taken
from a config. Only an explicit ``allow_outside=True`` (a flag the user typed, never a config
value) lifts the check.
"""

from __future__ import annotations

import os
from pathlib import Path

from maopd.base.errors import UserError


class PathOutsideRunError(UserError, ValueError):
    """A configured output path escapes the run directory. The message names the field."""


def resolve_inside(
    run_dir: str | os.PathLike, path: str | os.PathLike, *, field: str = "path", allow_outside: bool = False
) -> Path:
    """The absolute, symlink-resolved form of ``path`` (relative paths are taken from ``run_dir``).

    Raises ``PathOutsideRunError`` naming ``field`` when the result is not inside ``run_dir``
    (``..``, absolute paths, ``~`` and symlinks pointing out are all caught, since the check is
    made on the resolved path), unless ``allow_outside``. Empty paths and NUL bytes are rejected
    whatever ``allow_outside`` says.
    """
    text = os.fspath(path)
    if not text.strip():
        raise PathOutsideRunError(f"{field}: the path is empty")
    if "\x00" in text:
        raise PathOutsideRunError(f"{field}: the path {text!r} contains a NUL byte")
    root = Path(run_dir).expanduser().resolve()
    resolved = (root / Path(text).expanduser()).resolve()
    if not allow_outside and not resolved.is_relative_to(root):
        raise PathOutsideRunError(
            f"{field}: {text!r} resolves to {resolved}, outside the run directory {root}; "
            "use a path inside the run directory, or allow writing outside it explicitly"
        )
    return resolved
