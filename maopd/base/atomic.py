"""Writes that happen whole or not at all, so that a crash mid-write never leaves half of one.

* ``write_file_atomically`` / ``write_text_atomically``: a file written to a temporary file beside
  it, synced, then renamed over it.
* ``build_directory_atomically``: a directory built in a staging directory beside it, then renamed
  into place (a cache entry, a checkpoint).

Kept free of torch so that light modules (``training.run_logging``) can use it.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO


def write_file_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``path`` as ``write(handle)`` fills it, whole or not at all: written to a temporary file, synced,
    then renamed."""
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "wb") as handle:
        write(handle)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(tmp, path)


def write_text_atomically(path: Path, text: str) -> None:
    """``text`` in ``path``, whole or not at all."""
    write_file_atomically(path, lambda handle: handle.write(text.encode("utf-8")))


def build_directory_atomically(
    directory: str | os.PathLike, build: Callable[[Path], object], done_file: str | None = None
) -> Path:
    """``directory``, built by ``build(staging)`` in a staging directory beside it, then renamed.

    With ``done_file`` (a cache entry), a directory that already holds it is returned as is, and
    when two builders race the loser's copy is dropped and the winner's kept. Without it (a
    checkpoint saved again), an existing ``directory`` is replaced. The rename is atomic, so a
    reader never sees half a directory. Staging directories of builders that died (SIGKILL, power
    cut) are removed by the next build.
    """
    directory = Path(directory)
    if done_file is not None and (directory / done_file).is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(directory.parent, glob.escape(directory.name))
    # the pid in the name tells a later build whether this builder is still alive
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.staging-{os.getpid()}-", dir=directory.parent))
    try:
        build(staging)
        if done_file is None and directory.exists():
            shutil.rmtree(directory)
        try:
            staging.rename(directory)
        except OSError:
            if done_file is None or not (directory / done_file).is_file():
                raise
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return directory


def remove_stale_staging(parent: str | os.PathLike, names: str) -> None:
    """Delete ``parent/<names>.staging-<pid>-*`` (``names`` a glob) left by builders whose process is
    gone; live ones stay."""
    for path in Path(parent).glob(f"{names}.staging-*"):
        pid = path.name.rpartition(".staging-")[2].split("-", 1)[0]
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
