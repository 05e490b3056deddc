"""Paths the project writes: kept inside the run directory, and cache entries built atomically.

A run directory is data, possibly someone else's: a path it holds (the ``checkpoints/latest``
pointer, a ``step_N`` symlink) must not lead a run to read or load anything outside it. Every path
read from a run directory goes through ``resolve_inside`` (``training.checkpoint``); the paths a run
writes are built by the code from ``run_dir`` and checked names (stages, variants), never taken
from a config. Only an explicit ``allow_outside=True`` (a flag the user typed, never a config
value) lifts the check.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
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


def build_directory_atomically(directory: str | os.PathLike, build: Callable[[Path], object], done_file: str) -> Path:
    """``directory``, built by ``build(staging)`` in a staging directory beside it, then renamed.

    A directory that already holds ``done_file`` is returned as is. The rename is atomic, so a
    concurrent reader never sees half an entry; when two builders race, the loser's copy is
    dropped and the winner's kept. Staging directories of builders that died (SIGKILL, power cut)
    are removed by the next build.
    """
    directory = Path(directory)
    if (directory / done_file).is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(directory)
    # the pid in the name tells a later build whether this builder is still alive
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.staging-{os.getpid()}-", dir=directory.parent))
    try:
        build(staging)
        try:
            staging.rename(directory)
        except OSError:
            if not (directory / done_file).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return directory


def remove_stale_staging(directory: str | os.PathLike) -> None:
    """Delete ``<directory>.staging-<pid>-*`` left by builders whose process is gone; live ones stay."""
    directory = Path(directory)
    for path in directory.parent.glob(f"{directory.name}.staging-*"):
        pid = path.name.removeprefix(f"{directory.name}.staging-").split("-", 1)[0]
        if pid.isdigit() and not _alive(int(pid)):
            shutil.rmtree(path, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
