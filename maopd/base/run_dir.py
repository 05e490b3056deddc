"""Whether a directory is this run's: the one answer the stages, the pipeline and the π_0 cache share.

A directory belongs to the config that made it. A run directory records that config as YAML
(``config.yaml`` for a stage and in each of its checkpoints, ``pipeline.yaml`` for the main job);
a run may use the directory when it holds nothing yet, or records the same config up to the keys a
resume may change. Any other difference, and a directory that holds files but no readable record
of the config that made them, is refused before any work, naming every differing key
(``key: old -> new``), unless the caller starts the changed parts over (``--fresh``). A cache entry
(π_0) carries its config's key in its name instead, so finding it answers the question.

A run owns its directory while it writes (``owning``): one process at a time holds it
(``maopd.base.lock``), and every entry below it is the run's own, not a symbolic link to something
elsewhere, so that no write or delete of the run leaves it. The directory itself may be a link.
One exception: a logger's own directory (``LOGGER_DIRS``: W&B's ``wandb/``) may hold the links the
logger makes there (W&B's ``latest-run``, ``debug.log``, ``debug-internal.log``, and a link to its
core log in its cache). The run never writes through them, and a fresh start removes the links,
not what they point to; the logger's directory itself must be a directory, not a link.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from maopd.base.config import ConfigError, config_diff, dump_yaml, from_dict, parse_yaml, save_yaml, to_record
from maopd.base.errors import UserError
from maopd.base.lock import exclusive

CONFIG_FILE = "config.yaml"
LOCK_FILE = ".lock"
# directories a logger writes on its own, with symbolic links of its own: W&B's, made under ``dir=RUN_DIR``
LOGGER_DIRS = ("wandb",)

# What a stage run may change when it resumes: where it is, how long it runs, how it reports, and
# how many processes share it (a step is the same on 1 rank or on FSDP ranks, to float rounding).
RESUMABLE_KEYS = ("run_dir", "steps", "logging", "distributed")


def write_record(config: Any, directory: str | Path, name: str = CONFIG_FILE) -> None:
    """Record ``config`` as the one that made ``directory``."""
    save_yaml(config, Path(directory) / name)


class UnreadableRecordError(ConfigError):
    """A config record that exists but cannot be read: what it recorded is unknown, which is not
    "nothing recorded"."""

    def __init__(self, path: Path, reason: str):
        super().__init__(f"{path}: {reason}")
        self.reason = reason


def read_record(path: str | Path) -> dict[str, Any] | None:
    """The config a record file holds; None when there is no file. A file that holds no YAML
    mapping raises ``UnreadableRecordError``."""
    path = Path(path)
    if not path.is_file():
        return None
    try:
        data = parse_yaml(path.read_text(encoding="utf-8"), f"config record {path}")
    except UnicodeDecodeError:
        raise UnreadableRecordError(path, "unreadable: not UTF-8 text") from None
    except ConfigError as exc:
        raise UnreadableRecordError(path, f"unreadable: {exc}") from None
    if not isinstance(data, dict):
        raise UnreadableRecordError(path, "holds no mapping of settings")
    return data


def holds_anything(directory: str | Path) -> bool:
    """Whether ``directory`` holds an entry of a run (its lock file is none)."""
    directory = Path(directory)
    return directory.is_dir() and any(entry.name != LOCK_FILE for entry in directory.iterdir())


def as_plain(config: Any) -> dict[str, Any]:
    """``config`` as a record reads back: YAML's plain types (lists for tuples, and so on), secrets
    redacted, so that a resume compares what was saved with what would be saved."""
    return parse_yaml(dump_yaml(to_record(config)), "a config")


def read_as_current(config_type: type, saved: dict[str, Any]) -> dict[str, Any]:
    """A saved config read as today's ``config_type``: a field added since it was written takes its
    default, which by rule keeps the behaviour the run had, so it does not count as a change."""
    try:
        return as_plain(from_dict(config_type, saved))
    except ConfigError:
        return saved


def moved(data: Any, old_root: str, new_root: str) -> Any:
    """``data`` with paths under ``old_root`` moved under ``new_root`` (a run directory copied elsewhere)."""
    if isinstance(data, dict):
        return {k: moved(v, old_root, new_root) for k, v in data.items()}
    if isinstance(data, str) and (data == old_root or data.startswith(old_root + os.sep)):
        return new_root + data[len(old_root) :]
    return data


def changes_since(
    config: Any,
    directory: str | Path,
    ignore: tuple[str, ...] = RESUMABLE_KEYS,
    relocated: tuple[str, str] | None = None,
) -> list[str]:
    """``key: old -> new`` for each key on which ``config`` differs from the config that made
    ``directory`` (its ``config.yaml``; none when there is none), ``ignore`` excepted. With
    ``relocated`` = (old root, new root), the record's paths under the old root are read as under
    the new one: the run directory was copied there."""
    saved = Path(directory) / CONFIG_FILE
    try:
        made = read_record(saved)
    except UnreadableRecordError as exc:
        return [f"{CONFIG_FILE}: {exc.reason}, so what {directory} holds cannot be checked against this config"]
    if made is None:
        if not holds_anything(directory):
            return []
        return [f"{CONFIG_FILE}: missing, so what {directory} holds cannot be checked against this config"]
    made = read_as_current(type(config), made)
    if relocated is not None:
        made = moved(made, *relocated)
    return config_diff(made, as_plain(config), ignore)


def check_resume(config: Any, checkpoint: Path | None, resume: bool | None = None, check_config: bool = True) -> None:
    """Whether a stage may run in ``config.run_dir``, whose newest checkpoint is ``checkpoint``.

    ``resume=None`` resumes from the checkpoint when there is one; ``True`` requires one; ``False``
    (``--fresh``) refuses to overwrite a run that has checkpoints. A run resumes only under the
    config that made it (``RESUMABLE_KEYS`` excepted), unless the caller checked that itself
    (``check_config=False``).
    """
    run_dir = Path(config.run_dir)
    if resume is True and checkpoint is None:
        raise FileNotFoundError(f"run_dir {run_dir}: no checkpoint to resume from")
    if resume is False and checkpoint is not None:
        raise FileExistsError(f"run_dir {run_dir} already has checkpoints; resume or pick another run_dir")
    changed = changes_since(config, run_dir) if checkpoint is not None and check_config else []
    if changed:
        raise ConfigError(
            f"run_dir {run_dir} was trained under another config ({'; '.join(changed)}); a run "
            f"resumes only under the config that made it: restore those settings or pick another run_dir"
        )


@dataclass
class Conflicts:
    """What a run directory of several parts holds that another config made: every differing key,
    and the parts to start over (each changed part, and what depends on one)."""

    run_dir: Path
    differences: list[str] = field(default_factory=list)
    stale: list[Path] = field(default_factory=list)

    def add(self, path: Path, changed: list[str], upstream_changed: bool = False) -> None:
        """``path`` is stale when its own settings ``changed`` or a part it depends on did."""
        if changed or upstream_changed:
            self.differences += changed
            self.stale.append(path)

    def resolve(self, fresh: bool) -> list[Path]:
        """Raise ``ConfigError`` naming every differing key, or with ``fresh`` the paths to delete."""
        if self.differences and not fresh:
            raise ConfigError(
                f"{self.run_dir} was made under another config, and a stage resumes only under the config that "
                f"made it: {'; '.join(self.differences)}. Rerun with the settings it was made with, pick another "
                f"--run-dir, or pass --fresh to start the changed stages (and what depends on them) over"
            )
        return self.stale if fresh else []


class SymlinkInRunError(UserError):
    """An entry of a run directory is a symbolic link: a write or delete through it would leave the run."""


def refuse_symlinks(run_dir: str | Path, inside: str | Path | None = None) -> None:
    """Raise ``SymlinkInRunError`` naming the first symbolic link on the way from ``run_dir`` to
    ``inside`` (a path under it; default the run directory itself) or anywhere below ``inside``,
    except below a logger's own directory (``LOGGER_DIRS``). ``run_dir`` itself may be a link;
    nothing is followed."""
    root = Path(run_dir)
    target = root if inside is None else Path(inside)
    path = root
    for part in target.relative_to(root).parts:
        path = path / part
        if path.is_symlink():
            _refuse_link(root, path)
    if target.is_dir():
        pending = [target]
        while pending:
            with os.scandir(pending.pop()) as entries:
                for entry in entries:
                    if entry.is_symlink():
                        _refuse_link(root, Path(entry.path))
                    if entry.is_dir(follow_symlinks=False) and entry.name not in LOGGER_DIRS:
                        pending.append(Path(entry.path))


def _refuse_link(root: Path, link: Path) -> None:
    raise SymlinkInRunError(
        f"{link} is a symbolic link (to {os.readlink(link)}) inside the run directory {root}; a run writes "
        "and deletes only its own files: replace the link with a copy of what it points to, or remove it"
    )


@contextmanager
def owning(*directories: str | Path) -> Iterator[None]:
    """Hold ``directories`` (a run directory, and the run directories of its parts) for this process
    while the block runs: each is created, its entries are checked not to be symbolic links
    (``refuse_symlinks``), and its lock is taken (``LockedError`` naming the pid of another holder)
    and handed down to the processes this one starts. A directory created here that still holds
    nothing at the end is removed."""
    with ExitStack() as stack:
        for directory in map(Path, directories):
            if not directory.exists():
                stack.callback(_remove_if_empty, directory)
            directory.mkdir(parents=True, exist_ok=True)  # a file there: FileExistsError, named by maopd
            refuse_symlinks(directory)
            stack.enter_context(exclusive(directory / LOCK_FILE, f"run directory {directory}", hand_down=True))
        yield


def _remove_if_empty(directory: Path) -> None:
    if directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()


def start_over(path: str | Path) -> None:
    """Delete ``path`` for a fresh start; a directory keeps its lock file, which its holder holds."""
    path = Path(path)
    if not path.is_dir():
        path.unlink()
        return
    for entry in path.iterdir():
        if entry.name == LOCK_FILE:
            continue
        shutil.rmtree(entry) if entry.is_dir() and not entry.is_symlink() else entry.unlink()


def cache_entry(name: str, done_file: str, *roots: Path) -> Path:
    """Where the cache entry ``name`` is: under the first of ``roots`` that holds it complete
    (``done_file`` written), else under the last root, where it will be built."""
    for root in roots[:-1]:
        if (root / name / done_file).is_file():
            return root / name
    return roots[-1] / name
