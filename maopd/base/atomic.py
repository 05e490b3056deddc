"""The one writer: every file a command writes goes through it, whole or not at all, never through a link.

* ``write_file_atomically`` / ``write_text_atomically`` / ``write_json``-style callers: a file
  written to a fresh temporary file beside it (created exclusively, so nothing planted there is
  followed), synced, given ``FILE_MODE``, then renamed over it.
* ``open_atomically``: the same for a file written line by line (a corpus, a question set).
* ``write_path_atomically``: the same for a library that writes to a path it is given
  (``savefig``, ``np.save``): it writes the temporary path, which keeps the file's suffix.
* ``open_for_append``: a file that grows (metrics, evaluation records, a worker's log), opened with
  ``O_NOFOLLOW`` and checked before the first byte is written, never rewritten.
* ``copy_file``: a file copied into an output.
* ``copy_directory``: the files of a directory copied into an output, each as ``copy_file``.
* ``write_files_atomically``: the files a library saves into a directory (``save_pretrained``),
  each put in place as ``write_file_atomically`` puts one, beside what the directory holds.
* ``input_link``: a link to an input, for a library that reads a directory (pyserini).
* ``truncate_file``: a file cut short in place (a torn last line dropped), checked as an append is.
* ``output_directory``: a directory a library fills on its own (TensorBoard, W&B, Ray, faiss,
  pyserini), created here and checked to be a directory of its own, not a link.
* ``build_directory_atomically``: a directory built in a staging directory beside it, then renamed
  into place (a cache entry, a checkpoint, an index). One process builds a cache entry at a time;
  another that needs it waits for it (``maopd.base.lock``). What it holds gets ``FILE_MODE`` and
  ``DIRECTORY_MODE``.
* ``writing``: a write that fails for lack of space names its file and the space left.

Every target is checked first (``check_target``): a symbolic link there, or a file with more than
one hard link (``cp -al`` copies, ``ln``), is refused in one line naming it, since a write through
either would change a file elsewhere. ``tests/repo/test_one_writer.py`` fails on any write in the
project that bypasses this module (``open(..., "w")``, ``write_text``, ``to_csv``, ``savefig``,
``torch.save``, ...), except inside a function handed to one of its writers.

Kept free of torch so that light modules (``maopd.training.run_logging``) can use it.
"""

from __future__ import annotations

import errno
import glob
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, TextIO

from maopd.base.errors import UserError
from maopd.base.lock import exclusive

# how a failed write shows when it is not an OSError: torch.save's serializer ("unexpected pos",
# "file write failed") and safetensors' writer (the OS message inside its own error)
_FAILED_WRITE = re.compile(r"unexpected pos|file write failed|No space left on device|Disk quota exceeded")


# every file the project writes gets this mode, and every directory its builds make the other: what a
# user's other files have under the usual umask, so outputs read alike whoever made them
FILE_MODE = 0o644
DIRECTORY_MODE = 0o755


class LinkedOutputError(UserError):
    """A file to be written is a symbolic link or has another hard link: writing it would change a file
    elsewhere. The message names it and the fix."""


class NoSpaceError(UserError):
    """A write failed for lack of space; the message names the file and the space left on its device."""

    def __init__(self, path: str | os.PathLike, reason: str):
        super().__init__(no_space_message(path, reason))
        self.reason = reason


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
    often name no file, or a library's short write) into ``NoSpaceError`` naming ``path``. Nested,
    the outermost names its file: a file written in a staging directory is named where it goes."""
    try:
        yield
    except NoSpaceError as exc:
        raise NoSpaceError(path, exc.reason) from exc.__cause__
    except Exception as exc:
        if isinstance(exc, OSError) and exc.errno in (errno.ENOSPC, errno.EDQUOT):
            reason = "no space left on the device"
        elif _FAILED_WRITE.search(str(exc)):
            reason = f"the write failed ({' '.join(str(exc).split())})"
        else:
            raise
        raise NoSpaceError(path, reason) from exc


def check_target(path: str | os.PathLike) -> None:
    """Refuse (``LinkedOutputError``) a ``path`` to be written that is a symbolic link, or a file with
    more than one hard link; a missing ``path`` passes."""
    path = Path(path)
    try:
        status = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(status.st_mode):
        raise LinkedOutputError(
            f"{path} is a symbolic link (to {os.readlink(path)}); writing it would change the file it points "
            "to: remove the link, or choose another output"
        )
    if stat.S_ISREG(status.st_mode) and status.st_nlink > 1:
        raise LinkedOutputError(
            f"{path} has {status.st_nlink} hard links (a copy made with cp -al or ln?); writing it would change "
            "the other copies too: replace it with a copy of its own (cp --remove-destination), or choose "
            "another output"
        )


def _temporary_beside(path: Path) -> tuple[int, Path]:
    """A new file (descriptor, path) beside ``path``, created exclusively, keeping its suffix."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=f".tmp{path.suffix}", dir=path.parent)
    return fd, Path(name)


def _commit(tmp: Path, path: Path) -> None:
    """``tmp`` renamed over ``path``, with ``FILE_MODE``, once ``path`` is checked again: a link
    planted while the file was written is refused too."""
    check_target(path)
    os.chmod(tmp, FILE_MODE)
    os.replace(tmp, path)


@contextmanager
def _replacing(path: Path, text: bool, shown: str | os.PathLike | None = None) -> Iterator[BinaryIO | TextIO]:
    """A handle on a temporary file beside ``path`` that replaces it when the block ends (synced,
    ``FILE_MODE``); a failed block leaves ``path`` as it was and no temporary file."""
    check_target(path)
    with writing(shown or path):
        fd, tmp = _temporary_beside(path)
    try:
        with (
            writing(shown or path),
            os.fdopen(fd, "w" if text else "wb", **({"encoding": "utf-8"} if text else {})) as handle,
        ):
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        _commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_file_atomically(
    path: str | os.PathLike, write: Callable[[BinaryIO], object], shown: str | os.PathLike | None = None
) -> Path:
    """``path`` as ``write(handle)`` fills it, whole or not at all: written to a temporary file, synced,
    given ``FILE_MODE``, then renamed. A failed write leaves ``path`` as it was and no temporary file,
    and names ``shown`` (default ``path``; a file in a staging directory is named where it goes).
    Returns ``path``."""
    path = Path(path)
    with _replacing(path, text=False, shown=shown) as handle:
        write(handle)
    return path


@contextmanager
def open_atomically(path: str | os.PathLike) -> Iterator[TextIO]:
    """A text handle (UTF-8) whose lines become ``path`` when the block ends, whole or not at all: a
    file written line by line (a corpus, a question set) as ``write_file_atomically`` writes one."""
    with _replacing(Path(path), text=True) as handle:
        yield handle


def write_text_atomically(path: str | os.PathLike, text: str, shown: str | os.PathLike | None = None) -> Path:
    """``text`` in ``path`` as UTF-8, whole or not at all (``shown``: as ``write_file_atomically``)."""
    return write_file_atomically(path, lambda handle: handle.write(text.encode("utf-8")), shown)


def write_path_atomically(path: str | os.PathLike, save: Callable[[Path], object]) -> Path:
    """``path`` as ``save(temporary_path)`` writes it: for a library that takes a path, not a handle
    (``figure.savefig``). The temporary path keeps ``path``'s suffix, which such libraries read the
    format from."""
    path = Path(path)
    check_target(path)
    with writing(path):
        fd, tmp = _temporary_beside(path)
    os.close(fd)
    try:
        with writing(path):
            save(tmp)
        _commit(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return path


def open_for_append(path: str | os.PathLike, binary: bool = False, start_empty: bool = False) -> TextIO | BinaryIO:
    """``path`` opened to append (created with ``FILE_MODE`` when missing), never through a link: a
    symbolic link there is refused by the kernel (``O_NOFOLLOW``), and the opened file is checked to
    be a regular file with one hard link before anything is written; ``start_empty`` then empties it
    (a log that a process streams into). The caller closes it."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            check_target(path)
        raise
    try:
        status = os.fstat(fd)
        if not stat.S_ISREG(status.st_mode):
            raise LinkedOutputError(f"{path} is not a regular file; remove it, or choose another output")
        check_target(path)
        os.fchmod(fd, FILE_MODE)
        if start_empty:
            os.ftruncate(fd, 0)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "ab") if binary else os.fdopen(fd, "a", encoding="utf-8")


def copy_file(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """A copy of ``source`` in ``target``, written as every file is."""
    with open(source, "rb") as original:
        return write_file_atomically(target, lambda handle: shutil.copyfileobj(original, handle))


def copy_directory(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """A copy of the files below ``source`` in ``target`` (created when missing), each written as every
    file is; a link in ``source`` is refused, not followed."""
    source, target = Path(source), Path(target)
    for root, directories, files in os.walk(source):
        relative = Path(root).relative_to(source)
        output_directory(target / relative)
        for name in directories + files:
            if (Path(root) / name).is_symlink():
                check_target(Path(root) / name)
        for name in files:
            copy_file(Path(root) / name, target / relative / name)
    return target


def write_files_atomically(directory: str | os.PathLike, build: Callable[[Path], object]) -> Path:
    """The files ``build(staging)`` writes into a fresh staging directory, each moved into ``directory``
    (created when missing) as ``write_file_atomically`` would write it, beside what ``directory``
    holds already: for a library that saves several files into a directory (``save_pretrained``)
    where other files stay. A subdirectory the library makes is refused."""
    directory = output_directory(directory)
    remove_stale_staging(directory.parent, glob.escape(directory.name))
    staging = Path(tempfile.mkdtemp(prefix=f"{directory.name}.staging-{os.getpid()}-", dir=directory.parent))
    try:
        with writing(directory):
            build(staging)
        for entry in sorted(staging.iterdir()):
            if entry.is_symlink() or not entry.is_file():
                raise LinkedOutputError(f"{entry.name}: not a plain file; {directory} takes only files here")
            _commit(entry, directory / entry.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return directory


def input_link(source: str | os.PathLike, link: str | os.PathLike) -> Path:
    """A symbolic link ``link`` to ``source``, for a library that reads its input from a directory
    (pyserini's collection directory): made in a directory of this process's own (``link``'s parent
    must not exist yet or be empty), and never written through."""
    link = Path(link)
    if link.parent.exists() and any(link.parent.iterdir()):
        raise LinkedOutputError(f"{link.parent} is not empty; an input link goes into a directory of its own")
    output_directory(link.parent)
    link.symlink_to(Path(source).resolve())
    return link


def truncate_file(path: str | os.PathLike, size: int) -> None:
    """Cut ``path`` to its first ``size`` bytes (a torn last line dropped), never through a link."""
    with open_for_append(path, binary=True) as handle:
        handle.truncate(size)


def output_directory(path: str | os.PathLike, library_links: bool = False) -> Path:
    """``path`` as a directory that a library fills with files of its own naming (TensorBoard's events,
    W&B's run, Ray's session, a pyserini index): created when missing (parents too), refused
    (``LinkedOutputError``) when it is a symbolic link or holds one, since the library would write
    through it. ``library_links``: the library makes links of its own there (W&B's ``latest-run``,
    Ray's ``session_latest``), which are allowed below ``path``, never at it."""
    path = Path(path)
    if path.is_symlink():
        check_target(path)
    path.mkdir(parents=True, exist_ok=True)
    if library_links:
        return path
    for root, directories, files in os.walk(path):
        for name in directories + files:
            entry = Path(root) / name
            if entry.is_symlink():
                check_target(entry)
    return path


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
        _set_modes(staging)
        if directory.exists():
            shutil.rmtree(directory)
        staging.rename(directory)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return directory


def _set_modes(directory: Path) -> None:
    """``DIRECTORY_MODE`` for ``directory`` and the directories below it, ``FILE_MODE`` for its files,
    whatever mode the libraries that wrote them chose; a link left there is refused."""
    os.chmod(directory, DIRECTORY_MODE)
    for root, directories, files in os.walk(directory):
        for name in directories + files:
            entry = Path(root) / name
            if entry.is_symlink():
                check_target(entry)
            os.chmod(entry, DIRECTORY_MODE if name in directories else FILE_MODE)


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
