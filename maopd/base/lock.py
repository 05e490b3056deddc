"""Exclusive locks on what one process writes: a run directory, an ``eval run --out`` file, a cache entry.

A lock is ``fcntl.flock`` on a lock file that holds the holder's pid. The kernel releases it when
its process ends, however it ends (SIGKILL included), so a killed run is resumed by running it
again, with nothing to clean up by hand. The holder removes the file when it lets go; a file left
by a killed holder is taken over by the next one.

A lock is taken once per process: taking one this process holds already is a no-op (the
pipeline's stages run in its process, in directories it holds). A holder may hand a lock down to
the processes it starts (the pipeline's seed jobs): it passes them the locked descriptor itself
(``handed_down_fds``, for ``subprocess.Popen(pass_fds=...)``), and ``LOCKS_ENV`` tells a child
which descriptor number to look at. Only the kernel is trusted: the child works under the lock
when that descriptor is open on the lock file and ``flock`` on it succeeds, which it does only on
the open file the holder locked. An environment that merely names a lock, a pid or a descriptor
lets no other process in.
"""

from __future__ import annotations

import errno
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from maopd.base.errors import UserError

LOCKS_ENV = "MAOPD_LOCKS"

logger = logging.getLogger(__name__)

# the lock files (absolute) this process holds -> their descriptors
_held: dict[str, int] = {}


class LockedError(UserError):
    """What a lock guards is in use by another process; the message names its pid."""


def _handed_down() -> dict[str, int]:
    """Lock file -> the descriptor number its holder says it passed down (a hint, checked by ``_shares``)."""
    try:
        locks = json.loads(os.environ.get(LOCKS_ENV) or "{}")
    except json.JSONDecodeError:
        return {}
    return locks if isinstance(locks, dict) else {}


def _hand_down(key: str, fd: int | None) -> None:
    locks = _handed_down()
    if fd is None:
        locks.pop(key, None)
    else:
        locks[key] = fd
    if locks:
        os.environ[LOCKS_ENV] = json.dumps(locks)
    else:
        os.environ.pop(LOCKS_ENV, None)


def handed_down_fds() -> tuple[int, ...]:
    """The descriptors of the locks this process hands down: pass them to the processes it starts
    (``subprocess.Popen(pass_fds=...)``), so that they work under its locks."""
    return tuple(fd for key, fd in _handed_down().items() if _held.get(key) == fd)


def _shares(lock_file: Path, fd: object) -> bool:
    """Whether descriptor ``fd`` of this process is open on ``lock_file`` and holds its lock: the
    kernel grants ``flock`` again on the open file that holds it, and refuses any other."""
    if not isinstance(fd, int) or isinstance(fd, bool):
        return False
    try:
        opened, at_path = os.fstat(fd), os.stat(lock_file, follow_symlinks=False)
        if (opened.st_dev, opened.st_ino) != (at_path.st_dev, at_path.st_ino):
            return False
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def holder(lock_file: Path) -> int | None:
    """The pid written in ``lock_file``; None when there is none (not yet written, or no file)."""
    try:
        text = lock_file.read_text(encoding="utf-8").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _open(lock_file: Path) -> int:
    try:
        return os.open(lock_file, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UserError(
                f"{lock_file} is a symbolic link; a lock file must be a file of its own: remove the link"
            ) from None
        raise


def _try_lock(lock_file: Path, wait: bool) -> int | None:
    """A descriptor holding the lock on ``lock_file``; None when another process holds it."""
    while True:
        fd = _open(lock_file)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            os.close(fd)
            return None
        # the holder waited for removes its file on release: lock the file now at the path
        try:
            current = os.stat(lock_file, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        if current == os.fstat(fd).st_ino:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            return fd
        os.close(fd)


@contextmanager
def exclusive(lock_file: str | os.PathLike, what: str, wait: bool = False, hand_down: bool = False) -> Iterator[None]:
    """Hold the lock on ``lock_file`` for ``what`` (its name in messages) while the block runs.

    Another holder makes it raise ``LockedError`` naming that holder's pid, or with ``wait`` (a
    cache entry, which the other holder is building) wait for it to finish. With ``hand_down`` the
    processes this one starts meanwhile, passed ``handed_down_fds()``, work under the lock.
    """
    lock_file = Path(os.path.abspath(lock_file))
    key = str(lock_file)
    if key in _held:  # the outermost holder in this process lets go
        yield
        return
    fd = _try_lock(lock_file, wait=False)
    if fd is None:
        if _shares(lock_file, _handed_down().get(key)):
            yield  # the process that started this one holds it for both, and passed its descriptor
            return
        pid = holder(lock_file)
        if not wait:
            raise LockedError(
                f"{what} is in use by another process (pid {pid if pid is not None else 'unknown'}); "
                "wait for it to finish or stop it, or use another path"
            )
        logger.warning("%s is in use by pid %s; waiting for it to finish", what, pid)
        fd = _try_lock(lock_file, wait=True)
    _held[key] = fd
    if hand_down:
        _hand_down(key, fd)
    try:
        yield
    finally:
        del _held[key]
        if hand_down:
            _hand_down(key, None)
        try:
            lock_file.unlink()
        except FileNotFoundError:
            pass
        os.close(fd)
