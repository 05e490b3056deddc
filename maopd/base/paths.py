"""Paths the project writes: kept inside the run directory, and never over a command's own inputs.

A run directory is data, possibly someone else's: a path it holds (the ``checkpoints/latest``
pointer, a ``step_N`` symlink) must not lead a run to read or load anything outside it. Every path
read from a run directory goes through ``resolve_inside`` (``maopd.training.checkpoint``); the paths a run
writes are built by the code from ``run_dir`` and checked names (stages, variants), never taken
from a config. Only an explicit ``allow_outside=True`` (a flag the user typed, never a config
value) lifts the check. A command checks its output paths against its input paths before it writes
(``refuse_overwriting_inputs``).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from maopd.base.errors import UserError

PACKAGE_DIR = Path(__file__).resolve().parents[1]  # maopd/, installed or in a clone
# The repository when this is a clone's maopd/ (an installed package's parent is site-packages).
CLONE_DIR = PACKAGE_DIR.parent


def package_data(name: str) -> Path:
    """The package's data directory ``name`` (``configs``, ``models``): inside the installed package,
    where a wheel puts it, or at the top of a clone, where the repository keeps it."""
    installed = PACKAGE_DIR / name
    return installed if installed.is_dir() else CLONE_DIR / name


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


class OverwritesInputError(UserError, ValueError):
    """A command would write over one of its own inputs; the message names both."""


def _same(a: Path, b: Path) -> bool:
    if a.exists() and b.exists():
        return os.path.samefile(a, b)  # hard links and symlinks too
    return a.resolve() == b.resolve()


def refuse_overwriting_inputs(
    inputs: Iterable[tuple[str, str | os.PathLike | None]],
    outputs: Iterable[tuple[str, str | os.PathLike | None]],
    filled: Iterable[tuple[str, str | os.PathLike | None]] = (),
) -> None:
    """Raise ``OverwritesInputError`` when one of a command's ``outputs`` (name, file) is one of its
    ``inputs`` (name, file), or an input lies in one of the directories it ``filled`` with files
    of its own naming. Names are the options that gave the paths; None paths are skipped."""
    given = [(name, Path(path)) for name, path in inputs if path is not None]
    for out_name, out in ((n, Path(p)) for n, p in outputs if p is not None):
        for in_name, source in given:
            if _same(out, source):
                raise OverwritesInputError(
                    f"{out_name} {out} is {in_name} {source}: the command would write over its own input; "
                    f"choose another {out_name}"
                )
    for out_name, directory in ((n, Path(p)) for n, p in filled if p is not None):
        for in_name, source in given:
            if source.resolve().is_relative_to(directory.resolve()):
                raise OverwritesInputError(
                    f"{in_name} {source} lies in {out_name} {directory}, which the command fills with files of "
                    f"its own: give {out_name} a directory of its own"
                )
