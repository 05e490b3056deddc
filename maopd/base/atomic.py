"""Writes that happen whole or not at all, so that a crash mid-write never leaves half of one.

* ``write_file_atomically`` / ``write_text_atomically``: a file written to a temporary file beside
  it, synced, then renamed over it.
* ``build_directory_atomically``: a directory built in a staging directory beside it, then renamed
  into place (a cache entry, a checkpoint). One process builds a cache entry at a time; another
  that needs it waits for it (``maopd.base.lock``).
* ``writing``: a write that fails for lack of space names its file and the space left.

Kept free of torch so that light modules (``maopd.training.run_logging``) can use it.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from maopd.base.errors import UserError
from maopd.base.lock import exclusive

# how a failed write shows when it is not an OSError: torch.save's serializer ("unexpected pos",
# "file write failed") and safetensors' writer (the OS message inside its own error)
_FAILED_WRITE = re.compile(r"unexpected pos|file write failed|No space left on device|Disk quota exceeded")


class NoSpaceError(UserError):
    """A write failed for lack of space; the message names the file and the space left on its device."""


def free_space(path: str | os.PathLike) -> int:
    """Bytes free on the device that holds ``path`` (or its nearest existing parent)."""
    path = Path(os.path.abspath(path))
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free


def no_space_message(path: str | os.PathLike, reason: str = "no space left on the device") -> str:
    free = free_space(path) / 2**20
    return f"{path}: {reason} ({free:.1f} MiB free there); free some space or choose another location"


@contextmanager
def writing(path: str | os.PathLike) -> Iterator[None]:
    """Turn the block's failure to write ``path`` for lack of space (ENOSPC or a full quota, which
    often name no file, or a library's short write) into ``NoSpaceError`` naming ``path``."""
    try:
        yield
    except NoSpaceError:
        raise
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = "no space left on the device"
        elif _FAILED_WRITE.search(str(exc)):
            reason = f"the write failed ({' '.join(str(exc).split())})"
        else:
            raise
        raise NoSpaceError(no_space_message(path, reason)) from exc


def write_file_atomically(path: Path, write: Callable[[BinaryIO], object]) -> None:
    """``path`` as ``write(handle)`` fills it, whole or not at all: written to a temporary file, synced,
    then renamed. A failed write leaves ``path`` as it was and no temporary file."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with writing(path), open(tmp, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)


def write_text_atomically(path: Path, text: str) -> None:
    """``text`` in ``path``, whole or not at all."""
    write_file_atomically(path, lambda handle: handle.write(text.encode("utf-8")))


def build_directory_atomically(
    directory: str | os.PathLike, build: Callable[[Path], object], done_file: str | None = None
) -> Path:
    """``directory``, built by ``build(staging)`` in a staging directory beside it, then renamed.

    With ``done_file`` (a cache entry), a directory that already holds it is returned as is, and
    one process builds it at a time (the lock ``<directory>.lock`` beside it): another that needs
    it meanwhile waits, then takes the finished entry. Without it (a checkpoint saved again, by the
    process that holds the run directory), an existing ``directory`` is replaced. The rename is
    atomic, so a reader never sees half a directory. Staging directories of builders that died
    (SIGKILL, power cut) are removed by the next build.
    """
    directory = Path(directory)
    if done_file is None:
        return _build(directory, build)
    if (directory / done_file).is_file():
        return directory
    directory.parent.mkdir(parents=True, exist_ok=True)
    with exclusive(directory.with_name(f"{directory.name}.lock"), f"cache entry {directory}", wait=True):
        if (directory / done_file).is_file():  # built by the process waited for
            return directory
        return _build(directory, build)


def _build(directory: Path, build: Callable[[Path], object]) -> Path:
    directory.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_staging(directory.parent, glob.escape(directory.name))
    # the pid in the name tells a later build whether this builder is still alive
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.staging-{os.getpid()}-", dir=directory.parent))
    try:
        build(staging)
        if directory.exists():
            shutil.rmtree(directory)
        staging.rename(directory)
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
